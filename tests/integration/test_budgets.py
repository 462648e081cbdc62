"""The stored spend policy on both stores: budgets and the approval policy hold
at every door whatever the caller passes, concurrent enqueues cannot overshoot
a cap, windows are calendar windows in UTC, and quotes are checked against bills."""

from __future__ import annotations

import math
import threading
import uuid
from dataclasses import replace

import pytest

from nw import jobs
from nw.jobs import ApprovalRequired, BudgetExceeded
from nw.jobs.api.budgets import Budget, window
from tests.helpers import wait_until


def clear_postgres_policy(config) -> None:
    """Drop every budget and the approval policy of the test database (database-wide)."""
    if not config.database_url:
        return
    import psycopg

    with psycopg.connect(config.database_url, autocommit=True) as conn:
        conn.execute("DELETE FROM nw_jobs.budgets")
        conn.execute("DELETE FROM nw_jobs.approval")


@pytest.fixture
def pcfg(cfg):
    """``cfg`` with the database's policy cleared before and after (PostgreSQL)."""
    clear_postgres_policy(cfg)
    yield cfg
    clear_postgres_policy(cfg)


@pytest.fixture
def kind():
    """A kind of this test alone, registered for workers (a retry needs that): on
    PostgreSQL a budget counts every project of the database, so a budget
    narrowed to this kind sees only this test's jobs."""
    name = f"b{uuid.uuid4().hex[:10]}"
    jobs.register_kind(name, _fails)
    yield name
    from nw.jobs.core.kinds import unregister_kind

    unregister_kind(name)


def _fails(project, params):
    raise RuntimeError("this body always fails")


def _paid(usd):
    def body(project, params):
        return {"cost_usd_actual": usd, "has_unknown_costs": False}

    return body


def _wait_terminal(project, job_id, cfg):
    return wait_until(
        lambda: (j := jobs.get_job(project, job_id, config=cfg)) and j.is_terminal and j,
        timeout=30,
    )


def _count(project, cfg, kind):
    return len(jobs.list_jobs(project, kind=kind, limit=1000, config=cfg))


def _cap_left(project, cfg, left, **scope):
    """Set a budget of ``scope`` to what it has committed now plus ``left``."""
    jobs.set_budget(project, 1e6, **scope, config=cfg)
    (row,) = [
        b for b in jobs.list_budgets(project, config=cfg) if b["key"] == Budget(0, **scope).key
    ]
    return jobs.set_budget(project, row["spent_usd"] + left, **scope, config=cfg)


def _failed_job(project, cfg, kind, usd, **kw):
    job = jobs.enqueue(
        project, kind, {"estimated_usd": usd, **kw}, dispatch={kind: _fails}, config=cfg
    )
    assert _wait_terminal(project, job.job_id, cfg).status == jobs.FAILED
    return job


# ----- every door --------------------------------------------------------------------------
@pytest.mark.parametrize("door", ["enqueue", "enqueue_many", "retry_job", "retry_jobs"])
def test_each_door_refuses_past_a_stored_budget_whatever_the_caller_passes(
    project, pcfg, kind, door
):
    # Given a failed job (for the retries) and a budget of this kind with $0.50 left
    failed = _failed_job(project, pcfg, kind, 0.6) if door.startswith("retry") else None
    budget = _cap_left(project, pcfg, 0.5, kind=kind, per="day")
    before = _count(project, pcfg, kind)
    # When a door is asked for $0.60 with no budget in the caller's config
    plain = jobs.JobsConfig(database_url=pcfg.database_url)
    assert plain.budget_usd is None
    with pytest.raises(BudgetExceeded) as refused:
        if door == "enqueue":
            jobs.enqueue(project, kind, {"estimated_usd": 0.6}, config=plain)
        elif door == "enqueue_many":
            items = [(kind, {"estimated_usd": 0.3, "n": n}) for n in range(2)]
            jobs.enqueue_many(project, items, config=plain)
        elif door == "retry_job":
            jobs.retry_job(project, failed.job_id, config=plain)
        else:
            jobs.retry_jobs(project, kind=kind, config=plain)
    # Then it is refused by that budget, named, with its spend and cap; nothing is written
    exc = refused.value
    assert exc.budget == budget["key"] == f"kind={kind}/day"
    assert exc.cap_usd == pytest.approx(budget["usd"])
    assert f"budget '{budget['key']}' $0.50" in str(exc)
    if door == "enqueue_many":  # the batch as a whole: its second item goes past
        assert str(exc).startswith("item 1: ") and exc.quote_usd == 0.3
    else:
        assert "quote of $0.60" in str(exc) and exc.quote_usd == pytest.approx(0.6)
    assert _count(project, pcfg, kind) == before
    if failed is not None:
        assert jobs.get_job(project, failed.job_id, config=pcfg).status == jobs.FAILED
    # And within the budget the same door admits
    jobs.set_budget(project, budget["usd"] + 1.0, kind=kind, per="day", config=pcfg)
    if door == "enqueue":
        assert jobs.enqueue(project, kind, {"estimated_usd": 0.6}, config=plain).status == "queued"
    elif door == "retry_job":
        assert jobs.retry_job(project, failed.job_id, config=plain).status == "queued"


def test_the_stricter_of_the_config_cap_and_a_stored_budget_wins(project, pcfg, kind):
    budget = _cap_left(project, pcfg, 10.0, kind=kind)
    # a config cap below the stored budget refuses (the config's own cap)
    tight = replace(pcfg, budget_usd=jobs.spend(project, config=pcfg)["total_usd"] + 0.5)
    with pytest.raises(BudgetExceeded) as by_config:
        jobs.enqueue(project, kind, {"estimated_usd": 0.6}, config=tight)
    assert by_config.value.budget is None
    # a stored budget below the config cap refuses (the stored one, named)
    jobs.set_budget(project, budget["usd"] - 9.5, kind=kind, config=pcfg)
    loose = replace(pcfg, budget_usd=1e6)
    with pytest.raises(BudgetExceeded) as by_store:
        jobs.enqueue(project, kind, {"estimated_usd": 0.6}, config=loose)
    assert by_store.value.budget == f"kind={kind}"


def test_an_unknown_cost_under_a_stored_budget_needs_approval(project, pcfg, kind):
    _cap_left(project, pcfg, 1.0, kind=kind)
    with pytest.raises(BudgetExceeded) as refused:
        jobs.enqueue(project, kind, {}, config=pcfg)
    assert refused.value.needs_approval and refused.value.budget == f"kind={kind}"
    assert jobs.enqueue(project, kind, {}, approved=True, config=pcfg).status == "queued"


def test_per_actor_and_per_kind_budgets_count_only_their_own_jobs(project, pcfg, kind):
    ann, bob = f"ann-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
    jobs.set_budget(project, 1.0, actor=ann, config=pcfg)
    jobs.set_budget(project, 1.0, actor=bob, kind=kind, per="month", config=pcfg)
    jobs.enqueue(project, kind, {"estimated_usd": 0.6, "n": 1}, actor=ann, config=pcfg)
    with pytest.raises(BudgetExceeded) as refused:
        jobs.enqueue(project, kind, {"estimated_usd": 0.6, "n": 2}, actor=ann, config=pcfg)
    assert refused.value.budget == f"actor={ann}"
    # bob's budget is his jobs of this kind this month: ann's spend is not his
    jobs.enqueue(project, kind, {"estimated_usd": 0.6, "n": 3}, actor=bob, config=pcfg)
    with pytest.raises(BudgetExceeded) as also:
        jobs.enqueue(project, kind, {"estimated_usd": 0.6, "n": 4}, actor=bob, config=pcfg)
    assert also.value.budget == f"actor={bob},kind={kind}/month"
    # another kind of bob's is outside it
    other = f"{kind}x"
    jobs.enqueue(
        project, other, {"estimated_usd": 0.6}, actor=bob, dispatch={other: _fails}, config=pcfg
    )
    mine = jobs.spend(project, actor=ann, config=pcfg)["budgets"]
    assert [b["key"] for b in mine] == [f"actor={ann}"]  # not bob's
    assert len(jobs.spend(project, config=pcfg)["budgets"]) == 2
    shown = {b["key"]: b for b in jobs.list_budgets(project, config=pcfg)}
    assert shown[f"actor={ann}"]["spent_usd"] == pytest.approx(0.6)
    assert shown[f"actor={bob},kind={kind}/month"]["remaining_usd"] == pytest.approx(0.4)


def test_a_project_wide_budget_is_the_sum_over_every_actor_and_kind(project, pcfg, kind):
    budget = _cap_left(project, pcfg, 1.0)
    assert budget["key"] == "all"
    jobs.enqueue(project, kind, {"estimated_usd": 0.6}, actor="ann", config=pcfg)
    with pytest.raises(BudgetExceeded) as refused:
        jobs.enqueue(project, kind, {"estimated_usd": 0.6, "n": 2}, config=pcfg)
    assert refused.value.budget == "all"
    assert jobs.remove_budget(project, config=pcfg) is True
    assert jobs.remove_budget(project, config=pcfg) is False
    jobs.enqueue(project, kind, {"estimated_usd": 0.6, "n": 2}, config=pcfg)


# ----- windows -----------------------------------------------------------------------------
def test_a_day_budget_counts_what_finished_today_in_utc(project, pcfg, kind):
    # Given a job billed $4.00 that finished "now", and a $5.00 budget per day
    job = jobs.enqueue(
        project, kind, {"estimated_usd": 4.0}, dispatch={kind: _paid(4.0)}, config=pcfg
    )
    assert _wait_terminal(project, job.job_id, pcfg).cost.actual_usd == 4.0
    jobs.set_budget(project, 5.0, kind=kind, per="day", config=pcfg)
    # Then today $2.00 more is refused ...
    with pytest.raises(BudgetExceeded):
        jobs.enqueue(project, kind, {"estimated_usd": 2.0}, config=pcfg)
    # ... and tomorrow (UTC) the day's window starts empty
    _, tomorrow = window("day", pcfg.clock())
    later = replace(pcfg, clock=lambda: tomorrow + 60.0)
    assert jobs.list_budgets(project, config=later)[0]["spent_usd"] == 0.0
    assert jobs.enqueue(project, kind, {"estimated_usd": 2.0}, config=later).status == "queued"
    # while an all-time budget still counts it
    jobs.set_budget(project, 5.0, kind=kind, config=pcfg)
    with pytest.raises(BudgetExceeded) as refused:
        jobs.enqueue(project, kind, {"estimated_usd": 2.0, "n": 2}, config=later)
    assert refused.value.budget == f"kind={kind}"


def test_windows_are_calendar_windows_in_utc():
    from datetime import UTC, datetime

    wed = datetime(2026, 12, 2, 15, 30, tzinfo=UTC).timestamp()
    ts = lambda *a: datetime(*a, tzinfo=UTC).timestamp()  # noqa: E731
    assert window("day", wed) == (ts(2026, 12, 2), ts(2026, 12, 3))
    assert window("week", wed) == (ts(2026, 11, 30), ts(2026, 12, 7))  # Monday to Monday
    assert window("month", wed) == (ts(2026, 12, 1), ts(2027, 1, 1))
    assert window(None, wed) == (None, None)


# ----- approval ------------------------------------------------------------------------------
def test_approval_required_refuses_without_approved_at_every_door(project, pcfg, kind):
    failed = _failed_job(project, pcfg, kind, 3.0)
    # advisory (the default): the estimate says so, the enqueue does not ask
    assert jobs.estimate(project, kind, {"estimated_usd": 3.0}, config=pcfg)["approval_mode"] == (
        "advisory"
    )
    assert jobs.enqueue(project, kind, {"estimated_usd": 3.0, "n": 1}, config=pcfg).status == (
        "queued"
    )
    # required, with a stored threshold of $2.00
    policy = jobs.set_approval(project, threshold_usd=2.0, mode="required", config=pcfg)
    assert policy == {"threshold_usd": 2.0, "mode": "required", "stored": True}
    est = jobs.estimate(project, kind, {"estimated_usd": 3.0}, config=pcfg)
    assert est["requires_approval"] and est["approval_threshold_usd"] == 2.0
    assert est["approval_mode"] == "required"
    doors = [
        lambda **kw: jobs.enqueue(project, kind, {"estimated_usd": 3.0, "n": 2}, **kw),
        lambda **kw: jobs.enqueue_many(project, [(kind, {"estimated_usd": 3.0, "n": 3})], **kw),
        lambda **kw: jobs.retry_job(project, failed.job_id, **kw),
    ]
    before = _count(project, pcfg, kind)
    for door in doors:
        with pytest.raises(ApprovalRequired, match=r"approval required.*\$3\.00.*\$2\.00"):
            door(config=pcfg)
    assert _count(project, pcfg, kind) == before
    assert jobs.get_job(project, failed.job_id, config=pcfg).status == jobs.FAILED
    for door in doors:
        door(config=pcfg, approved=True)
    # below the threshold, nothing to approve; unknown cost always needs it
    jobs.enqueue(project, kind, {"estimated_usd": 1.0, "n": 4}, config=pcfg)
    with pytest.raises(ApprovalRequired, match="unknown"):
        jobs.enqueue(project, kind, {"n": 5}, config=pcfg)
    # back to advisory
    jobs.set_approval(project, mode="advisory", config=pcfg)
    jobs.enqueue(project, kind, {"n": 5}, config=pcfg)


# ----- concurrency -------------------------------------------------------------------------
def _at_once(n, submit):
    barrier = threading.Barrier(n)
    admitted, refused, failed = [], [], []

    def run(i):
        barrier.wait()
        try:
            admitted.append(submit(i))
        except BudgetExceeded:
            refused.append(i)
        except Exception as exc:  # neither an admission nor a refusal
            failed.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert failed == []
    return admitted, refused


def test_concurrent_enqueues_at_the_edge_of_a_stored_cap_do_not_overshoot(project, pcfg, kind):
    _cap_left(project, pcfg, 1.0, kind=kind, per="day")
    admitted, refused = _at_once(
        6, lambda i: jobs.enqueue(project, kind, {"i": i, "estimated_usd": 0.3}, config=pcfg)
    )
    assert len(admitted) == 3 and len(refused) == 3
    assert _count(project, pcfg, kind) == 3
    (row,) = jobs.list_budgets(project, config=pcfg)
    assert row["spent_usd"] == pytest.approx(0.9) and row["remaining_usd"] >= 0


@pytest.mark.postgres
def test_two_projects_under_one_database_budget_cannot_overshoot_it(tmp_path, kind):
    """On PostgreSQL a budget is database-wide: enqueues of two projects (each
    serialised only by its own project's lock) meet at the budget's row lock."""
    from nw import Project
    from tests.conftest import purge_postgres_project, require_postgres

    url = require_postgres()
    cfg = jobs.JobsConfig(database_url=url)
    clear_postgres_policy(cfg)
    projects = [Project.init(tmp_path / f"p{i}", title=f"p{i}") for i in range(2)]
    try:
        jobs.set_budget(projects[0], 1.0, kind=kind, config=cfg)
        admitted, refused = _at_once(
            6,
            lambda i: jobs.enqueue(
                projects[i % 2], kind, {"i": i, "estimated_usd": 0.3}, config=cfg
            ),
        )
        assert len(admitted) == 3 and len(refused) == 3
        assert jobs.list_budgets(projects[1], config=cfg)[0]["spent_usd"] == pytest.approx(0.9)
        assert jobs.list_budgets(projects[1], config=cfg)[0]["scope"] == "database"
    finally:
        clear_postgres_policy(cfg)
        for p in projects:
            purge_postgres_project(p)


def test_concurrent_batches_at_the_edge_of_a_stored_cap_do_not_overshoot(project, pcfg, kind):
    _cap_left(project, pcfg, 1.0, kind=kind)

    def batch(i):
        items = [(kind, {"i": i, "n": n, "estimated_usd": 0.25}) for n in range(2)]
        return jobs.enqueue_many(project, items, config=pcfg)

    admitted, refused = _at_once(4, batch)
    assert len(admitted) == 2 and len(refused) == 2  # each batch whole, or not at all
    assert _count(project, pcfg, kind) == 4


# ----- bad input -----------------------------------------------------------------------------
@pytest.mark.parametrize("usd", [-5, math.nan, math.inf, "5", True, None])
def test_a_budget_or_threshold_that_is_no_dollar_amount_is_refused(project, sqlite_cfg, usd):
    with pytest.raises(jobs.InvalidInput, match="usd"):
        jobs.set_budget(project, usd, config=sqlite_cfg)
    if usd is not None:
        with pytest.raises(jobs.InvalidInput, match="threshold_usd"):
            jobs.set_approval(project, threshold_usd=usd, config=sqlite_cfg)
    assert jobs.list_budgets(project, config=sqlite_cfg) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"per": "year"},
        {"actor": ""},
        {"kind": "a\x00b"},
        {"actor": "\udc80"},
        {"kind": 5},
    ],
)
def test_a_budget_scope_that_cannot_be_one_is_refused(project, sqlite_cfg, bad):
    with pytest.raises(jobs.InvalidInput):
        jobs.set_budget(project, 1.0, **bad, config=sqlite_cfg)
    with pytest.raises(jobs.InvalidInput, match="mode"):
        jobs.set_approval(project, mode="strict", config=sqlite_cfg)


@pytest.mark.parametrize("field", ["budget_usd", "actor_budget_usd", "approval_threshold_usd"])
@pytest.mark.parametrize("usd", [-5, math.nan, math.inf])
def test_jobs_config_refuses_a_negative_or_nan_cap(field, usd):
    with pytest.raises(jobs.ConfigError, match=field):
        jobs.JobsConfig(**{field: usd})


def test_budget_keys_name_scope_and_window_and_never_collide():
    assert Budget(1).key == "all"
    assert Budget(1, "day", "ann").key == "actor=ann/day"
    assert Budget(1, None, "ann", "r").key == "actor=ann,kind=r"
    assert Budget(1, None, "a,kind=b").key != Budget(1, None, "a", "b").key


# ----- quote against bill ----------------------------------------------------------------------
def test_cost_accuracy_compares_quotes_with_bills_per_kind_and_model(project, cfg, kind):
    billed = {1.0: 1.5, 2.0: 2.6, 4.0: 5.6}  # each 30-50% over its quote
    for n, (quote, actual) in enumerate(billed.items()):
        job = jobs.enqueue(
            project,
            kind,
            {"estimated_usd": quote, "model": "fal/kling", "n": n},
            dispatch={kind: _paid(actual)},
            config=cfg,
        )
        _wait_terminal(project, job.job_id, cfg)
    cheap = f"{kind}c"
    job = jobs.enqueue(
        project, cheap, {"estimated_usd": 1.0}, dispatch={cheap: _paid(0.5)}, config=cfg
    )
    _wait_terminal(project, job.job_id, cfg)

    by_kind = {r["kind"]: r for r in jobs.cost_accuracy(project, config=cfg)}
    over = by_kind[kind]
    assert over["jobs"] == 3 and over["median_ratio"] == pytest.approx(1.4)
    assert over["min_ratio"] == pytest.approx(1.3) and over["max_ratio"] == pytest.approx(1.5)
    assert over["over_usd"] == pytest.approx(9.7 - 7.0)
    assert by_kind[cheap]["over_usd"] == pytest.approx(-0.5)
    by_model = {r["model"]: r for r in jobs.cost_accuracy(project, by="model", config=cfg)}
    assert by_model["fal/kling"]["jobs"] == 3 and by_model["(unknown model)"]["jobs"] == 1

    # And the estimate of that kind says so beside the figure, which it leaves alone
    est = jobs.estimate(project, kind, {"estimated_usd": 1.0}, config=cfg)
    assert est["estimated_usd"] == 1.0
    assert est["accuracy"]["median_ratio"] == pytest.approx(1.4)
    assert "40% above their quotes" in est["accuracy"]["warning"]
    fine = jobs.estimate(project, cheap, {"estimated_usd": 1.0}, config=cfg)
    assert fine["accuracy"] is None  # too few runs to say anything
    with pytest.raises(jobs.InvalidInput, match="by"):
        jobs.cost_accuracy(project, by="actor", config=cfg)


def test_an_embedded_file_of_schema_4_gains_the_policy_tables_when_opened(tmp_path):
    import sqlite3

    from nw.jobs.stores.sqlite import SCHEMA_VERSION, SqliteJobStore

    # Given a file as version 4 left it (no budgets, no approval)
    path = tmp_path / "jobs.sqlite3"
    SqliteJobStore(path).close()
    conn = sqlite3.connect(path)
    conn.executescript("DROP TABLE budgets; DROP TABLE approval; PRAGMA user_version = 4;")
    conn.close()
    # Then a read-only handle reads no policy from it, and writes nothing
    reader = SqliteJobStore(path, read_only=True)
    try:
        assert reader.policy_rows() == [] and reader.budgets() == []
        assert reader.approval() is None
    finally:
        reader.close()
    # And a writable handle upgrades it in place, where a budget can be kept
    store = SqliteJobStore(path)
    try:
        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        store.set_budget("all", usd=1.0, per=None, actor_id=None, kind=None, now=1.0)
        assert [r["budget_key"] for r in store.budgets()] == ["all"]
    finally:
        store.close()
