"""Scarce providers on both stores: limits by key across worker processes, rates,
priorities, delays, fair share, per-actor budgets, and what a waiting job says."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
from au import ComputationStatus

from nw import jobs
from nw.jobs.core import kinds
from nw.jobs.stores import shared_store
from tests.conftest import clear_postgres_limits
from tests.fixtures import bodies
from tests.helpers import wait_until
from tests.integration.workers import start_worker, stop


@pytest.fixture(autouse=True)
def _kinds():
    bodies.register_all()
    yield
    kinds.unregister_kind("t.keyed")


@pytest.fixture(autouse=True)
def _no_limits(cfg):
    """PostgreSQL limits are database-wide: each test starts and ends without any."""
    clear_postgres_limits(cfg)
    yield
    clear_postgres_limits(cfg)


def _spans(log_path, model):
    """(start, end) wall times of each body of ``model``, from the bodies' own log."""
    starts, ends = {}, {}
    for line in log_path.read_text().splitlines():
        what, m, i, ts = line.split()
        if m == model:
            (starts if what == "start" else ends)[i] = float(ts)
    return [(starts[i], ends.get(i, float("inf"))) for i in starts]


def _max_overlap(spans):
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in events:  # an end at the same instant as a start is counted first
        now += step
        most = max(most, now)
    return most


def _claim_order(store, n, now, kinds=("t.noop",)):
    got = []
    for _ in range(n):
        rows = store.claim(list(kinds), now=now, runner_id="test-runner", limit=1)
        if not rows:
            break
        got.append(rows[0].record["params"]["i"])
    return got


@pytest.mark.slow
def test_four_workers_never_run_more_than_max_running_of_a_key(project, cfg, tmp_path):
    # Given a limit of 2 on key prov:a, 40 jobs of that key and 20 of a free key
    log = tmp_path / "spans.log"
    jobs.set_limit(project, "prov:a", max_running=2, config=cfg)
    for i in range(40):
        params = {"model": "a", "i": i, "log": str(log), "seconds": 0.15}
        jobs.enqueue(project, "t.span", params, config=cfg)
    for i in range(20):
        params = {"model": "b", "i": i, "log": str(log), "seconds": 0.15}
        jobs.enqueue(project, "t.span", params, config=cfg)
    # When four worker processes with three slots each drain them
    workers = [
        start_worker(project, max_concurrent=3, database_url=cfg.database_url) for _ in range(4)
    ]
    seen = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            lim = jobs.list_limits(project, config=cfg)[0]
            seen.append(lim["running"])  # the store's own count, sampled throughout
            done = jobs.list_jobs(project, status="succeeded", limit=100, config=cfg)
            if len(done) == 60:
                break
            time.sleep(0.01)
        assert len(done) == 60
    finally:
        for w in workers:
            stop(w)
    # Then no sample of the store saw more than 2 running, and it did reach 2
    assert max(seen) == 2
    a, b = _spans(log, "a"), _spans(log, "b")
    assert len(a) == 40 and len(b) == 20
    # and the bodies' own start/end log never overlaps more than 2 of key a
    assert _max_overlap(a) == 2
    # while the free key ran beside it, not after it: it overlapped more than 2
    # at once, and it was done long before key a's backlog was
    assert _max_overlap(b) > 2
    assert max(e for _, e in b) < max(e for _, e in a)


@pytest.mark.slow
def test_per_second_holds_within_one_job_per_window(project, cfg, tmp_path):
    log = tmp_path / "spans.log"
    jobs.set_limit(project, "prov:r", per_second=4, config=cfg)
    for i in range(16):
        params = {"model": "r", "i": i, "log": str(log), "seconds": 0.01}
        jobs.enqueue(project, "t.span", params, config=cfg)
    workers = [
        start_worker(project, max_concurrent=4, database_url=cfg.database_url) for _ in range(2)
    ]
    try:
        wait_until(
            lambda: len(jobs.list_jobs(project, status="succeeded", limit=50, config=cfg)) == 16,
            timeout=60,
            what="16 rate-limited jobs",
        )
    finally:
        for w in workers:
            stop(w)
    # the starts as the store stamped them (at claim, under the key's lock)
    done = jobs.list_jobs(project, status="succeeded", limit=50, config=cfg)
    starts = sorted(j.started_at.timestamp() for j in done)
    assert len(starts) == 16 and len(_spans(log, "r")) == 16
    busiest = max(sum(1 for t in starts if s <= t < s + 1.0) for s in starts)
    assert busiest <= 4
    assert starts[-1] - starts[0] >= 3.0  # 16 starts at 4/s take at least four windows


def test_priorities_order_claims_fifo_within(project, cfg):
    for i, prio in enumerate([0, 0, 5, 1, 5, 0]):
        jobs.enqueue(project, "t.noop", {"i": i}, priority=prio, config=cfg)
    store = shared_store(project, cfg, create=True)
    order = _claim_order(store, 6, now=cfg.clock() + 1)
    assert order == [2, 4, 3, 0, 1, 5]


def test_not_before_is_honoured_and_said(project, cfg):
    now = time.time()
    late = jobs.enqueue(project, "t.noop", {"i": 1}, not_before=now + 40, config=cfg)
    jobs.enqueue(project, "t.noop", {"i": 2}, config=cfg)
    store = shared_store(project, cfg, create=True)
    assert _claim_order(store, 2, now=now + 1) == [2]  # the delayed one is not due
    shown = jobs.get_job(project, late.job_id, config=cfg)
    assert shown.status == jobs.QUEUED and shown.waiting in ("starts in 40s", "starts in 39s")
    assert shown.not_before is not None and abs(shown.not_before.timestamp() - now - 40) < 1e-3
    assert _claim_order(store, 1, now=now + 41) == [1]


def test_not_before_refuses_a_naive_datetime(project, cfg):
    from datetime import datetime

    with pytest.raises(jobs.InvalidInput, match="aware"):
        jobs.enqueue(project, "t.noop", {"i": 1}, not_before=datetime(2030, 1, 1), config=cfg)
    with pytest.raises(jobs.InvalidInput, match="priority"):
        jobs.enqueue(project, "t.noop", {"i": 1}, priority="high", config=cfg)
    assert jobs.list_jobs(project, config=cfg) == []


def test_fair_share_rotates_claims_across_actors(project, cfg):
    for i in range(10):  # a burst from one actor
        jobs.enqueue(project, "t.noop", {"i": f"a{i}"}, actor="alice", config=cfg)
    for i in range(2):  # then another actor's two jobs
        jobs.enqueue(project, "t.noop", {"i": f"b{i}"}, actor="bob", config=cfg)
    store = shared_store(project, cfg, create=True)
    order = _claim_order(store, 12, now=cfg.clock() + 1)
    # bob's jobs do not wait for all of alice's: they take turns from the head
    assert order[:4] == ["a0", "b0", "a1", "b1"]
    assert order[4:] == [f"a{i}" for i in range(2, 10)]


def test_fair_share_does_not_let_a_newcomer_jump_a_backlog(project, cfg):
    for i in range(6):
        jobs.enqueue(project, "t.noop", {"i": f"a{i}"}, actor="alice", config=cfg)
    store = shared_store(project, cfg, create=True)
    assert _claim_order(store, 3, now=cfg.clock() + 1) == ["a0", "a1", "a2"]
    for i in range(4):  # bob arrives when alice's turn 4 is at the head
        jobs.enqueue(project, "t.noop", {"i": f"b{i}"}, actor="bob", config=cfg)
    order = _claim_order(store, 7, now=cfg.clock() + 1)
    assert order == ["a3", "b0", "a4", "b1", "a5", "b2", "b3"]


def test_a_full_key_holds_up_no_other_key_and_says_why(project, cfg):
    jobs.register_kind("t.keyed", "tests.fixtures.bodies:noop", limit_key=lambda p: p["key"])
    jobs.set_limit(project, "fal:kling", max_running=1, config=cfg)
    first = [
        jobs.enqueue(project, "t.keyed", {"i": i, "key": "fal:kling"}, config=cfg) for i in range(5)
    ]
    other = jobs.enqueue(project, "t.keyed", {"i": 9, "key": "fal:flux"}, config=cfg)
    store = shared_store(project, cfg, create=True)
    now = cfg.clock() + 1
    got = store.claim(["t.keyed"], now=now, runner_id="r1", limit=4)
    # one of the full key (its first in line), and the other key's job behind the backlog
    assert [r.record["job_id"] for r in got] == [first[0].job_id, other.job_id]
    assert store.claim(["t.keyed"], now=now, runner_id="r2", limit=4) == []
    waiting = jobs.get_job(project, first[1].job_id, config=cfg)
    assert waiting.waiting == "waiting: fal:kling at 1 of 1"
    assert waiting.limit_key == "fal:kling"
    lim = jobs.list_limits(project, config=cfg)
    assert lim[0]["key"] == "fal:kling" and lim[0]["running"] == 1
    # a finish releases the slot: the next one of the key is claimable
    row = got[0]
    assert store.finish(
        row.record["job_id"],
        au_status=ComputationStatus.COMPLETED,
        result={"ok": True},
        error=None,
        fields={"finished_at": now + 0.1},
        attempt=row.record["attempt"],
    )
    again = store.claim(["t.keyed"], now=now + 0.2, runner_id="r2", limit=4)
    assert [r.record["job_id"] for r in again] == [first[1].job_id]


def test_removing_a_limit_frees_its_key(project, cfg):
    jobs.set_limit(project, "k", max_running=0, config=cfg)  # 0: the key is paused
    jobs.register_kind("t.keyed", "tests.fixtures.bodies:noop", limit_key="k")
    jobs.enqueue(project, "t.keyed", {"i": 1}, config=cfg)
    store = shared_store(project, cfg, create=True)
    assert store.claim(["t.keyed"], now=cfg.clock() + 1, runner_id="r", limit=2) == []
    assert jobs.set_limit(project, "k", config=cfg) is None
    assert jobs.list_limits(project, config=cfg) == []
    assert len(store.claim(["t.keyed"], now=cfg.clock() + 1, runner_id="r", limit=2)) == 1


def test_set_limit_refuses_bad_values(project, cfg):
    with pytest.raises(jobs.InvalidInput, match="per_second"):
        jobs.set_limit(project, "k", per_second=0, config=cfg)
    with pytest.raises(jobs.InvalidInput, match="max_running"):
        jobs.set_limit(project, "k", max_running=1.5, config=cfg)
    with pytest.raises(jobs.InvalidInput, match="limit key"):
        jobs.set_limit(project, "", max_running=1, config=cfg)
    assert jobs.list_limits(project, config=cfg) == []


def test_a_limit_key_template_that_cannot_be_filled_is_refused(project, cfg):
    jobs.register_kind("t.keyed", "tests.fixtures.bodies:noop", limit_key="fal:{model}")
    with pytest.raises(jobs.InvalidInput, match="limit_key"):
        jobs.enqueue(project, "t.keyed", {"i": 1}, config=cfg)
    assert jobs.list_jobs(project, config=cfg) == []
    job = jobs.enqueue(project, "t.keyed", {"i": 1, "model": "kling"}, config=cfg)
    assert job.limit_key == "fal:kling"


def test_per_actor_budget_under_concurrent_enqueues(project, cfg):
    config = jobs.JobsConfig(
        **{k: getattr(cfg, k) for k in ("heartbeat_interval_s", "heartbeat_stale_s")},
        database_url=cfg.database_url,
        actor_budget_usd=1.0,
    )
    outcomes = []
    lock = threading.Lock()
    go = threading.Barrier(10)

    def submit(i):
        go.wait()
        try:
            jobs.enqueue(
                project, "t.noop", {"i": i, "estimated_usd": 0.3}, actor="u1", config=config
            )
            result = "ok"
        except jobs.BudgetExceeded as exc:
            result = "refused"
            assert "u1" in str(exc)
        with lock:
            outcomes.append(result)

    threads = [threading.Thread(target=submit, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # exactly three of 0.3 fit under 1.0, however the ten raced
    assert Counter(outcomes) == {"ok": 3, "refused": 7}
    assert len(jobs.list_jobs(project, actor="u1", config=config)) == 3
    spent = jobs.spend(project, actor="u1", config=config)
    assert spent["total_usd"] == pytest.approx(0.9) and spent["budget_usd"] == 1.0
    assert spent["remaining_usd"] == pytest.approx(0.1)
    # another actor has its own cap; an unknown cost still needs approval
    jobs.enqueue(project, "t.noop", {"i": 99, "estimated_usd": 0.3}, actor="u2", config=config)
    with pytest.raises(jobs.BudgetExceeded, match="approval"):
        jobs.enqueue(project, "t.noop", {"i": 100}, actor="u2", config=config)
    jobs.enqueue(project, "t.noop", {"i": 100}, actor="u2", approved=True, config=config)


def test_in_process_jobs_honour_limits_and_delays(project, cfg, tmp_path):
    log = tmp_path / "spans.log"
    config = jobs.JobsConfig(
        **{k: getattr(cfg, k) for k in ("heartbeat_interval_s", "heartbeat_stale_s")},
        database_url=cfg.database_url,
        max_concurrent=4,
    )
    jobs.set_limit(project, "inproc:x", max_running=1, config=config)
    at = time.time() + 0.5
    made = [
        jobs.enqueue(
            project,
            "local.span",
            {"model": "x", "i": i, "log": str(log), "seconds": 0.1},
            dispatch={"local.span": bodies.span},
            limit_key="inproc:x",
            not_before=at if i == 0 else None,
            config=config,
        )
        for i in range(4)
    ]
    for job in made:
        wait_until(
            lambda job=job: jobs.get_job(project, job.job_id, config=config).is_terminal,
            timeout=30,
            what="in-process job",
        )
    spans = _spans(log, "x")
    assert len(spans) == 4 and _max_overlap(spans) == 1
    first = jobs.get_job(project, made[0].job_id, config=config)
    assert first.started_at.timestamp() >= at


@pytest.mark.parametrize("version", [1, 3])
def test_an_older_embedded_file_is_upgraded_in_place(tmp_path, version):
    import json
    import sqlite3
    from pathlib import Path

    from nw.jobs.stores.sqlite import SCHEMA_VERSION, SqliteJobStore

    # Given a file written by the schema-1 (or the console's schema-3) code,
    # holding one claimable job
    path = tmp_path / "jobs.sqlite3"
    old = Path(__file__).parents[1] / "fixtures" / f"sqlite_schema_v{version}.sql"
    conn = sqlite3.connect(path)
    conn.executescript(old.read_text())
    doc = {"params": {"i": 1}, "label": "old", "idempotency_key": "k", "max_attempts": 1}
    conn.execute(
        "INSERT INTO jobs (job_id, created_at, kind, attempt, cancel_requested, doc)"
        " VALUES (?, 100.0, 't.noop', 0, 0, ?)",
        ("a" * 64, json.dumps(doc)),
    )
    conn.execute(
        "INSERT INTO status (job_id, status, created_at, attempt, queue_at)"
        " VALUES (?, 'pending', '1970-01-01T00:01:40+00:00', 0, 100.0)",
        ("a" * 64,),
    )
    conn.execute(f"PRAGMA user_version = {version}")
    conn.commit()
    conn.close()
    # When this code opens it
    store = SqliteJobStore(path)
    try:
        # Then it is at the current version, the old job is read and
        # claimed as before, and limits work in it
        from nw.jobs.stores.sqlite import SCHEMA_VERSION

        assert store._conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert store.get("a" * 64).record["label"] == "old"
        store.set_limit("k", max_running=1, per_second=None, now=200.0)
        assert [lim.key for lim in store.limits(now=200.0)] == ["k"]
        got = store.claim(["t.noop"], now=200.0, runner_id="r", limit=5)
        assert [r.record["job_id"] for r in got] == ["a" * 64]
    finally:
        store.close()


def test_a_delayed_in_process_job_can_be_cancelled_while_it_waits(project, cfg):
    ran = []
    job = jobs.enqueue(
        project,
        "local.noop",
        {"i": 1},
        dispatch={"local.noop": lambda project, params: ran.append(1)},
        not_before=time.time() + 30,
        config=cfg,
    )
    shown = jobs.get_job(project, job.job_id, config=cfg)
    assert shown.status == jobs.QUEUED and shown.waiting.startswith("starts in")
    assert jobs.cancel_job(project, job.job_id, config=cfg).status == jobs.CANCELLED
    from nw.jobs.execution.runtimes import existing_runtime
    from nw.jobs.stores import store_location

    runtimes = existing_runtime(store_location(project, cfg))
    assert runtimes.wait_idle(timeout=10)  # its pool thread let go at once
    assert ran == []


def test_in_process_jobs_start_by_priority(project, cfg, gate):
    config = jobs.JobsConfig(
        **{k: getattr(cfg, k) for k in ("heartbeat_interval_s", "heartbeat_stale_s")},
        database_url=cfg.database_url,
        max_concurrent=1,
    )
    order = []
    lock = threading.Lock()

    def body(project, params):
        with lock:
            order.append(params["i"])

    # one thread, held by a running job; then three wait for it
    jobs.enqueue(project, "local.gate", {"i": "gate"}, dispatch={"local.gate": gate}, config=config)
    assert gate.started.wait(10)
    for i, prio in (("low", 0), ("high", 5), ("mid", 1)):
        jobs.enqueue(
            project, "local.b", {"i": i}, dispatch={"local.b": body}, priority=prio, config=config
        )
    gate.release.set()
    wait_until(lambda: len(order) == 3, what="the three waiting jobs")
    assert order == ["high", "mid", "low"]


def test_a_retried_run_keeps_its_key_and_priority(project, cfg):
    jobs.register_kind("t.keyed", "tests.fixtures.bodies:noop", limit_key="fal:{model}")
    job = jobs.enqueue(project, "t.keyed", {"i": 1, "model": "kling"}, priority=3, config=cfg)
    assert jobs.cancel_job(project, job.job_id, config=cfg).status == jobs.CANCELLED
    again = jobs.retry_job(project, job.job_id, config=cfg)
    assert again.status == jobs.QUEUED
    assert again.limit_key == "fal:kling" and again.priority == 3


def test_a_limit_says_who_shares_it(project, cfg):
    got = jobs.set_limit(project, "fal:kling", max_running=2, config=cfg)
    assert got["scope"] == ("database" if cfg.database_url else "project")


# ----- a batch (enqueue_many) and a worker's refill (finishes that claim) -----------------
def test_a_batch_takes_its_kinds_key_priorities_turns_and_delays(project, cfg):
    jobs.set_limit(project, "prov:a", max_running=1, config=cfg)
    now = time.time()

    def item(model, i, **extra):
        return {"kind": "t.span", "params": {"model": model, "i": i}, **extra}

    got = jobs.enqueue_many(
        project,
        [
            item("a", "a0", actor="alice"),
            item("a", "a1", actor="alice", priority=5),
            item("b", "b0", actor="alice"),
            item("b", "b1", actor="alice"),
            item("b", "c0", actor="carol"),
            item("b", "late", not_before=now + 40),
        ],
        config=cfg,
    )
    # each job carries its kind's key, its priority and its delay, as enqueue gives them
    assert [j.limit_key for j in got] == ["prov:a", "prov:a"] + ["prov:b"] * 4
    assert [j.priority for j in got] == [0, 5, 0, 0, 0, 0]
    assert abs(got[5].not_before.timestamp() - now - 40) < 1e-3
    store = shared_store(project, cfg, create=True)
    # claimed by priority, then turns (carol does not wait behind alice's batch),
    # the full key passed over, the delayed job not yet due
    order = _claim_order(store, 6, now=now + 1, kinds=("t.span",))
    assert order == ["a1", "c0", "b0", "b1"]
    assert jobs.list_limits(project, config=cfg)[0]["running"] == 1
    assert _claim_order(store, 1, now=now + 41, kinds=("t.span",)) == ["late"]


def test_a_refill_starts_a_limited_key_only_where_its_limit_allows(project, cfg):
    from nw.jobs.stores.roles import Refill

    jobs.set_limit(project, "prov:a", max_running=1, config=cfg)
    items = [("t.span", {"model": "a", "i": f"a{i}"}) for i in range(3)]
    items += [("t.span", {"model": "b", "i": f"b{i}"}) for i in range(2)]
    items.append({"kind": "t.span", "params": {"model": "a", "i": "hi"}, "priority": 2})
    jobs.enqueue_many(project, items, config=cfg)
    store = shared_store(project, cfg, create=True)
    now = cfg.clock() + 1
    (first,) = store.claim(["t.span"], now=now, runner_id="w1", limit=1)
    assert first.record["params"]["i"] == "hi"  # the priority first, under its key's limit
    taken = []
    store.refill = Refill(
        kinds=lambda: ["t.span"],
        runner_id="w1",
        want=lambda ids: 3,
        take=lambda rows, asked: taken.append(rows),
        clock=lambda: now + 1,
    )

    def finish(row):
        assert store.finish(
            row.record["job_id"],
            au_status=ComputationStatus.COMPLETED,
            result={"ok": True},
            error=None,
            fields={"finished_at": now + 1},
            attempt=row.record["attempt"],
        )
        if cfg.database_url:  # PostgreSQL folds the claim into the finish
            assert len(taken) == 1
            return taken.pop()
        assert taken == []  # the embedded store does not refill: the worker claims
        return store.claim(["t.span"], now=now + 1, runner_id="w1", limit=3)

    # the finish frees key a's one slot: its next job starts in it, beside key b's
    rows = finish(first)
    assert sorted(r.record["params"]["i"] for r in rows) == ["a0", "b0", "b1"]
    assert all(r.status.value == "running" and r.record["attempt"] == 1 for r in rows)
    assert jobs.list_limits(project, config=cfg)[0]["running"] == 1
    # a finish of key b frees no slot of key a: nothing of it starts
    b0 = next(r for r in rows if r.record["params"]["i"] == "b0")
    assert finish(b0) == []
    assert jobs.list_limits(project, config=cfg)[0]["running"] == 1
    queued = {j.params["i"] for j in jobs.list_jobs(project, status="queued", config=cfg)}
    assert queued == {"a1", "a2"}


@pytest.mark.slow
def test_a_batch_drained_by_two_workers_keeps_a_keys_limit(project, cfg, tmp_path):
    log = tmp_path / "spans.log"
    jobs.set_limit(project, "prov:a", max_running=2, config=cfg)
    items = [
        ("t.span", {"model": m, "i": i, "log": str(log), "seconds": 0.1})
        for i in range(20)
        for m in ("a", "b")
    ]
    jobs.enqueue_many(project, items, config=cfg)
    workers = [
        start_worker(project, max_concurrent=4, database_url=cfg.database_url) for _ in range(2)
    ]
    try:
        wait_until(
            lambda: len(jobs.list_jobs(project, status="succeeded", limit=100, config=cfg)) == 40,
            timeout=120,
            what="40 jobs of a batch",
        )
    finally:
        for w in workers:
            stop(w)
    a, b = _spans(log, "a"), _spans(log, "b")
    assert len(a) == 20 and len(b) == 20
    assert _max_overlap(a) == 2  # never more than the limit, and it was reached
    assert _max_overlap(b) > 2  # the free key ran beside it


def test_a_batch_is_gated_by_each_actors_budget_as_a_whole(project, cfg):
    config = jobs.JobsConfig(
        **{k: getattr(cfg, k) for k in ("heartbeat_interval_s", "heartbeat_stale_s")},
        database_url=cfg.database_url,
        actor_budget_usd=1.0,
    )

    def item(i, actor):
        return {"kind": "t.noop", "params": {"i": i, "estimated_usd": 0.3}, "actor": actor}

    jobs.enqueue(project, "t.noop", {"i": 0, "estimated_usd": 0.3}, actor="u1", config=config)
    # 0.3 spent: two more fit under u1's 1.0, a third does not (u2's are its own)
    batch = [item(1, "u1"), item(2, "u2"), item(3, "u1"), item(4, "u2"), item(5, "u1")]
    with pytest.raises(jobs.BudgetExceeded, match=r"^item 4: spend cap of actor 'u1'") as refused:
        jobs.enqueue_many(project, batch, config=config)
    assert refused.value.actor == "actor 'u1'"
    assert len(jobs.list_jobs(project, config=config)) == 1  # all or nothing
    made = jobs.enqueue_many(project, batch[:4], config=config)
    assert len({j.job_id for j in made}) == 4
    assert jobs.spend(project, actor="u1", config=config)["total_usd"] == pytest.approx(0.9)
