"""``nw-jobs budget`` and the spend policy through the real entry point: a
budget set from the CLI holds for ``nw-jobs enqueue`` and ``retry``, the
approval policy is set and enforced, ``estimate`` refuses a bad figure, and
``spend --accuracy`` compares quotes with bills."""

from __future__ import annotations

import json

from nw import jobs
from tests.cli.test_cli import nw_jobs, one_line_error
from tests.helpers import wait_until


def billed(project, params):
    return {"cost_usd_actual": params["bill"], "has_unknown_costs": False}


def test_a_budget_set_from_the_cli_holds_for_cli_enqueues(project):
    where = ("--project", str(project.root))
    imports = ("--import", "tests.fixtures.bodies")
    made = nw_jobs("budget", "set", "1", "--per", "day", "--kind", "t.noop", *where, "--json")
    assert made.returncode == 0, made.stderr
    (row,) = json.loads(made.stdout)
    assert row["key"] == "kind=t.noop/day" and row["usd"] == 1.0 and row["spent_usd"] == 0.0
    ok = nw_jobs("enqueue", "t.noop", "--params", '{"estimated_usd": 0.6}', *where, *imports)
    assert ok.returncode == 0, ok.stderr
    over = nw_jobs(
        "enqueue", "t.noop", "--params", '{"estimated_usd": 0.6, "n": 2}', *where, *imports
    )
    one_line_error(over, "budget 'kind=t.noop/day' $1.00")
    listed = nw_jobs("budget", "list", *where)
    assert listed.returncode == 0
    assert "kind=t.noop/day: $0.60 of $1.00 per day (UTC), $0.40 left (project)" in listed.stdout
    gone = nw_jobs("budget", "remove", "--per", "day", "--kind", "t.noop", *where)
    assert gone.returncode == 0 and "no budgets" in gone.stdout
    one_line_error(nw_jobs("budget", "remove", "--per", "day", *where), "no such budget")


def test_nonsense_budgets_are_refused_in_one_line(project):
    where = ("--project", str(project.root))
    for usd in ("-5", "nan", "inf"):
        one_line_error(nw_jobs("budget", "set", usd, *where), "usd must be a finite number")
    one_line_error(nw_jobs("budget", "set", *where), "needs the cap in dollars")
    one_line_error(nw_jobs("budget", "approval", "--threshold", "-1", *where), "threshold_usd")
    assert jobs.list_budgets(project) == []


def test_the_approval_policy_set_from_the_cli_is_enforced(project):
    where = ("--project", str(project.root))
    imports = ("--import", "tests.fixtures.bodies")
    shown = nw_jobs("budget", "approval", "--mode", "required", "--threshold", "2", *where)
    assert shown.returncode == 0 and "approval required at $2.00" in shown.stdout
    params = ("--params", '{"estimated_usd": 3}')
    one_line_error(nw_jobs("enqueue", "t.noop", *params, *where, *imports), "approval required")
    ok = nw_jobs("enqueue", "t.noop", *params, "--approved", *where, *imports)
    assert ok.returncode == 0, ok.stderr
    est = nw_jobs("estimate", "t.noop", *params, *where, *imports, "--json")
    assert json.loads(est.stdout)["approval_mode"] == "required"


def test_estimate_refuses_a_figure_that_is_no_dollar_amount(project):
    where = ("--project", str(project.root), "--import", "tests.fixtures.bodies")
    for bad in ('"abc"', "-5"):
        result = nw_jobs("estimate", "t.noop", "--params", f'{{"estimated_usd": {bad}}}', *where)
        one_line_error(result, "estimated_usd'] must be a number of dollars")


def test_spend_accuracy_shows_quotes_against_bills(project):
    for n, (quote, bill) in enumerate([(1.0, 1.5), (2.0, 2.4)]):
        job = jobs.enqueue(
            project,
            "r",
            {"estimated_usd": quote, "bill": bill, "n": n},
            dispatch={"r": billed},
        )
        wait_until(lambda j=job: jobs.get_job(project, j.job_id).is_terminal)
    shown = nw_jobs("spend", "--accuracy", "--project", str(project.root))
    assert shown.returncode == 0, shown.stderr
    assert "r: 2 jobs, billed/quoted median 1.35 (middle half 1.27" in shown.stdout
    assert "$0.90 over ($3.90 billed of $3.00 quoted)" in shown.stdout
    as_json = nw_jobs(
        "spend", "--accuracy", "--by", "model", "--project", str(project.root), "--json"
    )
    (row,) = json.loads(as_json.stdout)
    assert row["model"] == "(unknown model)" and row["jobs"] == 2


def test_estimate_notes_when_recent_bills_ran_over_their_quotes(project):
    for n in range(3):
        job = jobs.enqueue(
            project,
            "t.noop",
            {"estimated_usd": 1.0, "bill": 1.5, "n": n},
            dispatch={"t.noop": billed},
        )
        wait_until(lambda j=job: jobs.get_job(project, j.job_id).is_terminal)
    where = ("--project", str(project.root), "--import", "tests.fixtures.bodies")
    shown = nw_jobs("estimate", "t.noop", "--params", '{"estimated_usd": 1}', *where)
    assert shown.returncode == 0, shown.stderr
    assert "estimated cost $1.00" in shown.stdout  # the quote stands
    assert "note: recent t.noop jobs were billed 50% above their quotes" in shown.stdout
