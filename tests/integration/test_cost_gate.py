"""The cost gate through the facade: plan identity, re-quotes, budgets, honest actuals, spend."""

from __future__ import annotations

import json
import logging
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from nw import jobs, pricing
from nw.jobs import UNREADABLE_PLAN_REASON, BudgetExceeded
from nw.plans import NonCanonicalPlan, PlanError, plan_hash
from tests.helpers import wait_until

TABLE = {
    "id": "gate.rates",
    "as_of": "2026-11-01",
    "rates": {
        "img/a": {"unit": "image", "usd": 0.1},
        "vid/b": {"unit": "second", "usd": 0.1},
    },
}


def write_rates(folder: Path, vid_usd: float = 0.1) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    table = {**TABLE, "rates": {**TABLE["rates"], "vid/b": {"unit": "second", "usd": vid_usd}}}
    (folder / "rates.json").write_text(json.dumps(table))
    return str(folder)


@pytest.fixture
def rates(tmp_path):
    return write_rates(tmp_path / "rates")


@pytest.fixture
def config(cfg, rates):
    return replace(cfg, rates_path=rates)


def video_plan(seconds: float, rates: str, prompt: str = "a tiger") -> dict:
    """A one-call plan priced (and stamped) at the rates in ``rates``."""
    usd, basis = pricing.quote_call("vid/b", {"seconds": seconds}, rates_path=rates)
    return {
        "calls": [
            {
                "tool": "image_to_video",
                "application": "vid/b",
                "arguments": {"prompt": prompt, "duration": seconds},
                "output_kind": "video",
                "estimated_cost_usd": usd,
                "cost_basis": basis,
            }
        ]
    }


def unpriced_plan(prompt: str = "a tiger") -> dict:
    return {
        "calls": [
            {
                "tool": "generate_image",
                "application": "img/a",
                "arguments": {"prompt": prompt},
                "output_kind": "image",
                "estimated_cost_usd": 0.0,
            }
        ]
    }


def db_path(project) -> Path:
    return Path(project.root) / ".nw/jobs/jobs.sqlite3"


def count_jobs(project) -> int:
    """Jobs stored for the project, on whichever backend holds them."""
    from tests.conftest import postgres_job_count

    if not db_path(project).exists():
        return postgres_job_count(project)
    with sqlite3.connect(db_path(project)) as conn:
        return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]


def finished(project, job_id, config):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=config)) and j.is_terminal and j,
        what=f"job {job_id[:8]} to finish",
    )


# ----- estimate ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "usd", "needs"),
    [
        ({}, None, True),
        ({"estimated_usd": 0.5}, 0.5, False),
        ({"estimated_usd": 1.0}, 1.0, True),
    ],
)
def test_without_a_plan_the_callers_figure_is_the_estimate(project, params, usd, needs):
    out = jobs.estimate(project, "r", params)
    assert out == {
        "estimated_usd": usd,
        "has_unknown_costs": usd is None,
        "approval_threshold_usd": 1.0,
        "requires_approval": needs,
        "quote": None,
        "approval_mode": "advisory",
        "accuracy": None,
    }


@pytest.mark.parametrize("bad", [-1, "cheap", float("nan"), float("inf"), True, 1e308, 2e9])
def test_a_callers_figure_that_is_no_dollar_amount_is_refused_not_ignored(project, bad):
    with pytest.raises(jobs.InvalidInput, match=r"estimated_usd"):
        jobs.estimate(project, "r", {"estimated_usd": bad})


def test_with_a_plan_todays_quote_decides_and_the_callers_figure_is_only_reported(
    project, config, tmp_path
):
    # Given a plan priced yesterday at $0.50 and a caller that says $0.01,
    # when the table has moved tenfold, then the estimate is today's $5.00.
    plan = video_plan(5, config.rates_path)
    today = replace(config, rates_path=write_rates(tmp_path / "today", vid_usd=1.0))
    out = jobs.estimate(project, "r", {"plan": plan, "estimated_usd": 0.01}, config=today)
    assert out["estimated_usd"] == pytest.approx(5.0)
    assert out["has_unknown_costs"] is False and out["requires_approval"] is True
    assert out["quote"]["status"] == "changed"
    assert out["quote"]["as_of_total_usd"] == pytest.approx(0.5)
    assert out["quote"]["caller_estimated_usd"] == 0.01


def test_an_unchanged_plan_under_the_threshold_needs_no_approval(project, config):
    out = jobs.estimate(project, "r", {"plan": video_plan(3, config.rates_path)}, config=config)
    assert out["estimated_usd"] == pytest.approx(0.3) and out["requires_approval"] is False
    assert out["quote"]["status"] == "unchanged" and out["quote"]["caller_estimated_usd"] is None


def test_a_plan_that_cannot_be_requoted_is_unknown_even_if_the_caller_says_free(project, config):
    out = jobs.estimate(
        project, "r", {"plan": unpriced_plan(), "estimated_usd": 0.0}, config=config
    )
    assert out["estimated_usd"] is None and out["has_unknown_costs"] is True
    assert out["requires_approval"] is True
    assert out["quote"]["status"] == "unknown" and out["quote"]["as_of_total_usd"] == 0.0


@pytest.mark.parametrize(
    "bad_plan",
    [
        "generate a tiger",
        {"steps": []},
        {"calls": [{"tool": "t"}]},
        {"calls": [{**unpriced_plan()["calls"][0], "arguments": {"seed": float("nan")}}]},
    ],
)
def test_an_unreadable_plan_gives_the_fixed_reason_and_logs_the_error(
    project, config, caplog, bad_plan
):
    with caplog.at_level(logging.WARNING, logger="nw.jobs"):
        out = jobs.estimate(project, "r", {"plan": bad_plan, "estimated_usd": 0.2}, config=config)
    assert out["estimated_usd"] is None and out["requires_approval"] is True
    assert out["reason"] == UNREADABLE_PLAN_REASON
    assert out["quote"]["reason"] == UNREADABLE_PLAN_REASON
    assert out["quote"]["caller_estimated_usd"] == 0.2
    assert any(r.exc_info and isinstance(r.exc_info[1], PlanError) for r in caplog.records)
    assert not db_path(project).exists()


def test_malformed_units_raise_in_estimate_and_enqueue_with_a_plan(project, config):
    params = {"plan": video_plan(1, config.rates_path), "units": 0}
    with pytest.raises(ValueError, match="units"):
        jobs.estimate(project, "r", params, config=config)
    with pytest.raises(ValueError, match="units"):
        jobs.enqueue(project, "r", params, dispatch={"r": lambda p, q: {}}, config=config)
    assert count_jobs(project) == 0


# ----- enqueue: identity and the stored figure -----------------------------------


def test_enqueue_stores_the_same_requoted_figure_estimate_gives(project, config, gate, tmp_path):
    plan = video_plan(4, config.rates_path)
    today = replace(config, rates_path=write_rates(tmp_path / "today", vid_usd=0.25))
    params = {"plan": plan, "estimated_usd": 0.01}
    expected = jobs.estimate(project, "r", params, config=today)["estimated_usd"]
    job = jobs.enqueue(project, "r", params, dispatch={"r": gate}, config=today)
    assert job.cost.estimated_usd == expected == pytest.approx(1.0)
    assert jobs.get_job(project, job.job_id, config=today).cost.estimated_usd == expected


def test_the_same_plan_reordered_or_repriced_is_one_job(project, config, gate):
    plan = video_plan(4, config.rates_path)
    respelled = json.loads(json.dumps(plan))
    respelled["calls"][0]["arguments"] = {"duration": 4, "prompt": "a tiger"}
    respelled["calls"][0]["estimated_cost_usd"] = 99.0
    respelled["calls"][0]["cost_basis"]["table_version"] = "older"
    a = jobs.enqueue(project, "r", {"plan": plan}, dispatch={"r": gate}, config=config)
    b = jobs.enqueue(
        project, "r", {"estimated_usd": 3, "plan": respelled}, dispatch={"r": gate}, config=config
    )
    assert a.job_id == b.job_id and a.run_id == b.run_id
    assert a.idempotency_key == plan_hash(plan)


def test_structurally_different_plans_are_different_jobs(project, config, gate):
    params = {"title": "same everything else"}
    a = jobs.enqueue(
        project,
        "r",
        {**params, "plan": video_plan(4, config.rates_path, "a tiger")},
        dispatch={"r": gate},
        config=config,
    )
    b = jobs.enqueue(
        project,
        "r",
        {**params, "plan": video_plan(4, config.rates_path, "a lion")},
        dispatch={"r": gate},
        config=config,
    )
    c = jobs.enqueue(
        project,
        "r",
        {**params, "plan": video_plan(6, config.rates_path, "a tiger")},
        dispatch={"r": gate},
        config=config,
    )
    assert len({a.job_id, b.job_id, c.job_id}) == 3


@pytest.mark.parametrize(
    ("bad_plan", "error"),
    [
        ({"calls": [{"tool": "t"}]}, PlanError),
        ("generate a tiger", PlanError),
        (
            {"calls": [{**unpriced_plan()["calls"][0], "arguments": {"x": {1, 2}}}]},
            NonCanonicalPlan,
        ),
        (
            {"calls": [{**unpriced_plan()["calls"][0], "arguments": {"x": float("inf")}}]},
            NonCanonicalPlan,
        ),
    ],
)
def test_a_plan_that_cannot_be_identified_is_refused_and_nothing_is_written(
    project, config, bad_plan, error
):
    with pytest.raises(error):
        jobs.enqueue(
            project, "r", {"plan": bad_plan}, dispatch={"r": lambda p, q: {}}, config=config
        )
    assert count_jobs(project) == 0


def test_a_live_falaw_plan_and_its_dict_are_one_job_and_the_body_gets_the_dict(
    project, config, gate
):
    falaw = pytest.importorskip("falaw")
    live = falaw.Plan(calls=(falaw.plan_generate_image("a tiger", consult_cache=False),))
    a = jobs.enqueue(project, "r", {"plan": live}, dispatch={"r": gate}, config=config)
    b = jobs.enqueue(
        project, "r", {"plan": falaw.plan_to_dict(live)}, dispatch={"r": gate}, config=config
    )
    assert a.job_id == b.job_id
    assert a.params["plan"] == falaw.plan_to_dict(live)
    assert falaw.plan_from_dict(a.params["plan"]) == live
    by_object = jobs.estimate(project, "r", {"plan": live}, config=config)
    by_dict = jobs.estimate(project, "r", {"plan": falaw.plan_to_dict(live)}, config=config)
    assert by_object == by_dict and by_object["estimated_usd"] == pytest.approx(live.total_cost_usd)


# ----- budgets -------------------------------------------------------------------


def test_a_quote_past_the_cap_is_refused_naming_cap_committed_and_quote(project, config, gate):
    # Given a $1.00 cap and a live job quoted at $0.60, when a second $0.60 job
    # is enqueued, then it is refused and nothing is written.
    capped = replace(config, budget_usd=1.0)
    first = jobs.enqueue(
        project,
        "r",
        {"plan": video_plan(6, capped.rates_path)},
        dispatch={"r": gate},
        config=capped,
    )
    with pytest.raises(BudgetExceeded) as err:
        jobs.enqueue(
            project,
            "r",
            {"plan": video_plan(6, capped.rates_path, "a lion")},
            dispatch={"r": gate},
            config=capped,
        )
    assert (err.value.cap_usd, err.value.committed_usd) == (1.0, pytest.approx(0.6))
    assert err.value.quote_usd == pytest.approx(0.6)
    assert "$1.00" in str(err.value) and str(err.value).count("$0.60") == 2
    assert count_jobs(project) == 1
    assert [j.job_id for j in jobs.list_jobs(project, config=capped)] == [first.job_id]


def test_a_resubmit_of_the_live_job_and_a_quote_exactly_at_the_cap_pass(project, config, gate):
    capped = replace(config, budget_usd=1.0)
    plan = video_plan(6, capped.rates_path)
    first = jobs.enqueue(project, "r", {"plan": plan}, dispatch={"r": gate}, config=capped)
    again = jobs.enqueue(project, "r", {"plan": plan}, dispatch={"r": gate}, config=capped)
    fits = jobs.enqueue(
        project,
        "r",
        {"plan": video_plan(4, capped.rates_path, "a lion")},
        dispatch={"r": gate},
        config=capped,
    )
    assert again.job_id == first.job_id and fits.job_id != first.job_id
    assert jobs.spend(project, config=capped)["total_usd"] == pytest.approx(1.0)


def test_the_gate_counts_actual_spend_of_finished_jobs(project, config):
    capped = replace(config, budget_usd=1.0)

    def spends(project, params):
        return {"cost_usd_actual": params["spent"], "has_unknown_costs": False}

    done = jobs.enqueue(
        project,
        "r",
        {"plan": video_plan(1, capped.rates_path), "spent": 0.9},
        dispatch={"r": spends},
        config=capped,
    )
    assert finished(project, done.job_id, capped).cost.actual_usd == 0.9
    with pytest.raises(BudgetExceeded, match=r"\$0\.90 is committed"):
        jobs.enqueue(
            project,
            "r",
            {"plan": video_plan(2, capped.rates_path, "a lion")},
            dispatch={"r": spends},
            config=capped,
        )
    small = jobs.enqueue(
        project,
        "r",
        {"plan": video_plan(1, capped.rates_path, "a cat"), "spent": 0.1},
        dispatch={"r": spends},
        config=capped,
    )
    assert small.cost.estimated_usd == pytest.approx(0.1)


def test_the_gate_uses_todays_quote_not_the_frozen_or_callers_figure(project, config, tmp_path):
    plan = video_plan(5, config.rates_path)  # frozen at $0.50
    today = replace(config, budget_usd=1.0, rates_path=write_rates(tmp_path / "today", vid_usd=1.0))
    with pytest.raises(BudgetExceeded) as err:
        jobs.enqueue(
            project,
            "r",
            {"plan": plan, "estimated_usd": 0.0},
            dispatch={"r": lambda p, q: {}},
            approved=True,
            config=today,
        )
    assert err.value.quote_usd == pytest.approx(5.0) and not err.value.needs_approval
    assert not db_path(project).exists()


def test_an_unknown_quote_under_a_cap_needs_explicit_approval(project, config, gate):
    capped = replace(config, budget_usd=1.0)
    with pytest.raises(BudgetExceeded, match="approved=True") as err:
        jobs.enqueue(project, "r", {"plan": unpriced_plan()}, dispatch={"r": gate}, config=capped)
    assert err.value.quote_usd is None and err.value.needs_approval
    assert count_jobs(project) == 0
    job = jobs.enqueue(
        project, "r", {"plan": unpriced_plan()}, dispatch={"r": gate}, approved=True, config=capped
    )
    assert job.cost.estimated_usd is None
    uncapped = jobs.enqueue(
        project, "r", {"plan": unpriced_plan("a lion")}, dispatch={"r": gate}, config=config
    )
    assert uncapped.cost.estimated_usd is None


def test_approval_never_lifts_a_known_quote_over_the_cap_nor_an_unknown_one_past_it(
    project, config, gate
):
    capped = replace(config, budget_usd=0.5)
    with pytest.raises(BudgetExceeded):
        jobs.enqueue(
            project,
            "r",
            {"plan": video_plan(6, capped.rates_path)},
            dispatch={"r": gate},
            approved=True,
            config=capped,
        )
    jobs.enqueue(
        project,
        "r",
        {"plan": video_plan(5, capped.rates_path)},
        dispatch={"r": gate},
        config=capped,
    )
    with pytest.raises(BudgetExceeded, match="nothing is left"):
        jobs.enqueue(
            project,
            "r",
            {"plan": unpriced_plan()},
            dispatch={"r": gate},
            approved=True,
            config=capped,
        )
    assert count_jobs(project) == 1


def test_without_a_plan_the_cap_gates_the_callers_figure(project, config, gate):
    capped = replace(config, budget_usd=1.0)
    jobs.enqueue(project, "r", {"estimated_usd": 0.7}, dispatch={"r": gate}, config=capped)
    with pytest.raises(BudgetExceeded):
        jobs.enqueue(project, "r", {"estimated_usd": 0.4}, dispatch={"r": gate}, config=capped)


# ----- actual cost: lower bounds on both paths -----------------------------------


def body_reporting(event: dict | None, result: dict):
    def body(project, params, *, on_event):
        if event is not None:
            on_event(event)
        return result

    return body


@pytest.mark.parametrize(
    ("event", "result", "actual", "lower"),
    [
        ({"actual_usd": 0.4, "has_unknown_costs": True}, {}, 0.4, True),
        (None, {"cost_usd_actual": 0.4, "has_unknown_costs": True}, 0.4, True),
        (None, {"actual_usd": 0.4, "has_unknown_costs": False}, 0.4, False),
        ({"actual_usd": 0.2, "has_unknown_costs": True}, {"cost_usd_actual": 0.4}, 0.4, True),
        (
            {"has_unknown_costs": True},
            {"cost_usd_actual": 0.4, "has_unknown_costs": False},
            0.4,
            True,
        ),
        ({"has_unknown_costs": False}, {"actual_is_lower_bound": True}, None, True),
        ({"actual_usd": float("nan")}, {}, None, True),
        (None, {"cost_usd_actual": 0.4}, 0.4, None),
        (None, {}, None, None),
    ],
)
def test_actual_is_a_lower_bound_when_either_path_reports_unknown_costs(
    project, config, event, result, actual, lower
):
    job = jobs.enqueue(
        project, "r", {}, dispatch={"r": body_reporting(event, result)}, config=config
    )
    done = finished(project, job.job_id, config)
    assert done.status == jobs.SUCCEEDED
    assert done.cost.actual_usd == actual
    assert done.cost.actual_is_lower_bound is lower


def test_cache_hit_savings_are_kept(project, config):
    body = body_reporting(None, {"cost_usd_actual": 0.0, "cache_hit_savings_usd": 0.3})
    job = jobs.enqueue(project, "r", {}, dispatch={"r": body}, config=config)
    done = finished(project, job.job_id, config)
    assert (done.cost.actual_usd, done.cost.cache_hit_savings_usd) == (0.0, 0.3)


# ----- the project's spend -------------------------------------------------------


def test_spend_of_a_project_that_never_ran_a_job_is_zero_and_writes_nothing(project, config):
    out = jobs.spend(project, config=replace(config, budget_usd=2.0))
    assert out == {
        "actual_usd": 0.0,
        "live_estimated_usd": 0.0,
        "total_usd": 0.0,
        "live_unknown_count": 0,
        "is_lower_bound": False,
        "budget_usd": 2.0,
        "remaining_usd": 2.0,
        "budgets": [],
    }
    assert not db_path(project).exists()


def test_spend_sums_finished_actuals_and_live_estimates_and_says_when_it_is_a_floor(
    project, config, gate
):
    exact = body_reporting(None, {"cost_usd_actual": 0.3, "has_unknown_costs": False})
    done = jobs.enqueue(project, "r", {"n": 1}, dispatch={"r": exact}, config=config)
    finished(project, done.job_id, config)
    jobs.enqueue(
        project,
        "live",
        {"plan": video_plan(6, config.rates_path)},
        dispatch={"live": gate},
        config=config,
    )
    out = jobs.spend(project, config=config)
    assert out["actual_usd"] == pytest.approx(0.3)
    assert out["live_estimated_usd"] == pytest.approx(0.6)
    assert out["total_usd"] == pytest.approx(0.9)
    assert out["is_lower_bound"] is False and out["live_unknown_count"] == 0

    jobs.enqueue(project, "live", {"plan": unpriced_plan()}, dispatch={"live": gate}, config=config)
    out = jobs.spend(project, config=config)
    assert out["live_unknown_count"] == 1 and out["is_lower_bound"] is True


def test_a_finished_lower_bound_makes_the_spend_a_floor(project, config):
    floor = body_reporting(None, {"cost_usd_actual": 0.3, "has_unknown_costs": True})
    job = jobs.enqueue(project, "r", {}, dispatch={"r": floor}, config=config)
    finished(project, job.job_id, config)
    out = jobs.spend(project, config=config)
    assert out["actual_usd"] == pytest.approx(0.3) and out["is_lower_bound"] is True


def _enqueue_six_at_once(project, config, gate):
    import threading

    barrier = threading.Barrier(6)
    admitted, refused, failed = [], [], []

    def submit(i):
        barrier.wait()
        try:
            params = {"i": i, "estimated_usd": 0.6}
            admitted.append(jobs.enqueue(project, "r", params, dispatch={"r": gate}, config=config))
        except BudgetExceeded:
            refused.append(i)
        except Exception as exc:  # an error is neither an admission nor a refusal
            failed.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failed == []
    return admitted, refused


def test_concurrent_enqueues_cannot_both_pass_the_budget(project, cfg, gate):
    admitted, refused = _enqueue_six_at_once(project, replace(cfg, budget_usd=1.0), gate)
    assert len(admitted) == 1 and len(refused) == 5
    assert count_jobs(project) == 1


def test_the_budget_is_checked_again_inside_the_create_under_a_forced_collision(
    project, cfg, gate, monkeypatch
):
    """Two enqueues both pass the gate before either writes (forced, not hoped
    for); then each waits for the other inside its create, so that without the
    project's lock (PostgreSQL) both would read the spend before either inserts.
    The re-check inside the create, serialised per project, must refuse one."""
    import contextlib
    import threading

    from nw.jobs.api.costing import Quote

    real_gate = Quote.gate
    passed_outside = threading.Barrier(2, timeout=30)
    inside = threading.Barrier(2, timeout=2)  # with the lock held, the partner never comes
    calls = threading.local()

    def colliding_gate(self, store, **kw):
        calls.n = getattr(calls, "n", 0) + 1
        if calls.n == 1:  # the check before the create: both pass, then both go on
            real_gate(self, store, **kw)
            passed_outside.wait()
            return None
        # the check inside the create transaction; serialised by the project's
        # lock, the other is not here: go on once the barrier gives up
        with contextlib.suppress(threading.BrokenBarrierError):
            inside.wait()
        return real_gate(self, store, **kw)

    monkeypatch.setattr(Quote, "gate", colliding_gate)
    capped = replace(cfg, budget_usd=1.0)
    outcomes = []

    def submit(i):
        try:
            params = {"i": i, "estimated_usd": 0.6}
            outcomes.append(jobs.enqueue(project, "r", params, dispatch={"r": gate}, config=capped))
        except BudgetExceeded as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(type(o).__name__ for o in outcomes) == ["BudgetExceeded", "Job"]
    assert count_jobs(project) == 1


def test_a_job_cancelled_before_it_started_does_not_make_spend_a_lower_bound(project, gate):
    one = jobs.JobsConfig(max_concurrent=1)

    def exact(project, params, **kw):
        gate(project, params, should_cancel=kw["should_cancel"], on_event=kw["on_event"])
        return {"cost_usd_actual": 0.2, "has_unknown_costs": False}

    blocker = jobs.enqueue(project, "b", {}, dispatch={"b": exact}, config=one)
    assert gate.started.wait(5)
    never = jobs.enqueue(project, "r", {"n": 2}, dispatch={"r": exact}, config=one)
    assert jobs.cancel_job(project, never.job_id, config=one).status == jobs.CANCELLED
    gate.release.set()
    wait_until(lambda: jobs.get_job(project, blocker.job_id, config=one).is_terminal)
    view = jobs.spend(project, config=one)
    assert view["actual_usd"] == 0.2
    assert view["is_lower_bound"] is False


def test_re_running_a_job_keeps_what_earlier_runs_spent(project, cfg):
    def paid(project, params):
        return {"cost_usd_actual": 4.0, "has_unknown_costs": False}

    for run in (1, 2):
        job = jobs.enqueue(project, "r", {}, dispatch={"r": paid}, config=cfg)
        done = wait_until(
            lambda j=job: (x := jobs.get_job(project, j.job_id, config=cfg)).is_terminal and x
        )
        assert done.cost.actual_usd == 4.0 and done.attempt == 1  # this run's own figures
        assert jobs.spend(project, config=cfg)["actual_usd"] == pytest.approx(4.0 * run)


def test_a_budget_cannot_be_bypassed_by_re_running_one_key(project, cfg):
    capped = jobs.JobsConfig(budget_usd=5.0, database_url=cfg.database_url)

    def paid(project, params):
        return {"cost_usd_actual": 4.0, "has_unknown_costs": False}

    job = jobs.enqueue(project, "r", {"estimated_usd": 4.0}, dispatch={"r": paid}, config=capped)
    wait_until(lambda: jobs.get_job(project, job.job_id, config=capped).is_terminal)
    with pytest.raises(jobs.BudgetExceeded):
        jobs.enqueue(project, "r", {"estimated_usd": 4.0}, dispatch={"r": paid}, config=capped)
