"""The store contract (stores/base.py), one suite for every backend.

Each test reads Given / When / Then against the ``store`` fixture, which runs
it on the embedded SQLite store and on PostgreSQL.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import Counter
from datetime import UTC, datetime

import pytest
from au import ComputationResult, ComputationStatus

from nw.jobs.core.errors import JobStoreError
from nw.jobs.core.status import job_status
from nw.jobs.stores.roles import Refill

T0 = 1_700_000_000.0
_ids = itertools.count(1)


def jid(n: int | None = None) -> str:
    return f"{next(_ids) if n is None else n:064x}"


def record(job_id: str | None = None, *, kind: str = "render", at: float = T0, **extra) -> dict:
    rec = {
        "job_id": job_id or jid(),
        "kind": kind,
        "label": kind,
        "idempotency_key": f"key-{at}",
        "params": {"n": 1},
        "created_at": at,
        "started_at": None,
        "finished_at": None,
        "heartbeat_at": None,
        "attempt": 0,
        "max_attempts": 1,
        "cancel_requested": False,
        "runner": "worker",
        "run_id": f"run-{at}",
        "actor": None,
        "estimated_usd": None,
    }
    rec.update(extra)
    return rec


def queued(store, n: int = 1, *, kind: str = "render", claimable: bool = True, at: float = T0):
    out = []
    for i in range(n):
        row, created = store.create(record(kind=kind, at=at + i), claimable=claimable)
        assert created
        out.append(row.record["job_id"])
    return out


def finish_ok(store, job_id: str, attempt: int | None, at: float = T0 + 100) -> bool:
    return store.finish(
        job_id,
        au_status=ComputationStatus.COMPLETED,
        result={"ok": True},
        error=None,
        fields={"finished_at": at},
        attempt=attempt,
    )


# ----- create and dedup ----------------------------------------------------------------
def test_create_puts_a_queued_job_once(store):
    rec = record()
    row, created = store.create(rec, claimable=True)
    assert created and row.status.value == "queued"
    again, created_again = store.create(record(rec["job_id"], at=T0 + 5), claimable=True)
    assert not created_again
    assert again.record["created_at"] == T0 and again.status.value == "queued"
    got = store.get(rec["job_id"])
    assert got.record["params"] == {"n": 1} and got.record["attempt"] == 0
    assert got.au_status == "pending"


def test_create_returns_the_running_and_cancelling_job(store):
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w", limit=1)
    row, created = store.create(record(a, at=T0 + 2), claimable=True)
    assert not created and row.status.value == "running"
    store.request_cancel(a, now=T0 + 3)
    row, created = store.create(record(a, at=T0 + 4), claimable=True)
    assert not created and row.status.value == "cancelling"


def test_create_replaces_a_finished_job_with_a_new_run(store):
    (a,) = queued(store)
    (row,) = store.claim(["render"], now=T0 + 1, runner_id="w")
    store.append_progress(a, {"ts": T0 + 1, "pct": 10.0}, attempt=1)
    assert finish_ok(store, a, 1)
    row, created = store.create(record(a, at=T0 + 50, params={"n": 2}), claimable=True)
    assert created and row.status.value == "queued"
    got = store.get(a)
    assert got.status.value == "queued" and got.record["attempt"] == 1  # the lease carries on
    assert got.record["attempt_base"] == 1
    assert got.record["params"] == {"n": 2} and got.record["finished_at"] is None
    assert got.result is None
    assert store.progress(a, limit=10) == []
    (again,) = store.claim(["render"], now=T0 + 60, runner_id="w")
    assert again.record["job_id"] == a and again.record["attempt"] == 2
    assert not finish_ok(store, a, 1)  # the old run's lease token never comes back


def test_a_replaced_run_carries_its_spend_and_attempt(store):
    # Given a job that was re-run once already and whose second run spent too
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w")
    store.finish(
        a,
        au_status=ComputationStatus.FAILED,
        result=None,
        error="x",
        fields={"finished_at": T0 + 2, "actual_usd": 1.0, "prior_actual_usd": 0.5},
        attempt=1,
    )
    row, created = store.create(record(a, at=T0 + 10), claimable=True)
    assert created and row.record["earlier_runs_usd"] == 1.5 and row.record["attempt"] == 1
    assert store.spend()["actual_usd"] == 1.5  # the queued new run: nothing lost
    store.claim(["render"], now=T0 + 11, runner_id="w")
    store.finish(
        a,
        au_status=ComputationStatus.COMPLETED,
        result=None,
        error=None,
        fields={"finished_at": T0 + 12, "actual_usd": 0.25, "actual_is_lower_bound": False},
        attempt=2,
    )
    assert store.spend()["actual_usd"] == 1.75
    # When it is replaced again
    row, created = store.create(record(a, at=T0 + 20), claimable=True)
    # Then the new run starts from attempt 2 and carries everything spent so far
    got = store.get(a).record
    assert created and got["attempt"] == 2 and got["attempt_base"] == 2
    assert got["earlier_runs_usd"] == 1.75 and got.get("actual_usd") is None
    assert row.record["earlier_runs_usd"] == 1.75
    assert store.spend()["actual_usd"] == 1.75


def test_a_replaced_run_that_spent_nothing_carries_no_spend(store):
    (a,) = queued(store)
    store.request_cancel(a, now=T0 + 1)  # cancelled before it ran: attempt 0, no spend
    _, created = store.create(record(a, at=T0 + 2), claimable=True)
    got = store.get(a).record
    assert created and got["attempt"] == 0 and got["attempt_base"] == 0
    assert got.get("earlier_runs_usd") is None and store.spend()["actual_usd"] == 0.0


def test_two_threads_creating_the_same_id_get_one_job(store):
    for _ in range(15):
        job_id = jid()
        barrier = threading.Barrier(4)
        results: list[bool] = []
        lock = threading.Lock()

        def go(job_id=job_id, barrier=barrier, lock=lock, results=results):
            barrier.wait()
            _, created = store.create(record(job_id), claimable=True)
            with lock:
                results.append(created)

        threads = [threading.Thread(target=go) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False, False, False, True]
    assert len(list(store.iter_ids())) == 15


def test_threads_re_creating_a_finished_id_get_one_new_run(store):
    for n in range(10):
        (job_id,) = queued(store, at=T0 + 100 * n)
        store.claim(["render"], now=T0 + 100 * n + 1, runner_id="w")
        assert finish_ok(store, job_id, 1, at=T0 + 100 * n + 2)
        barrier = threading.Barrier(4)
        results: list[bool] = []
        lock = threading.Lock()

        def go(i, job_id=job_id, barrier=barrier, lock=lock, results=results, n=n):
            rec = record(job_id, at=T0 + 100 * n + 10 + i)
            barrier.wait()
            _, created = store.create(rec, claimable=True)
            with lock:
                results.append(created)

        threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(results) == [False, False, False, True]
        got = store.get(job_id)
        assert got.status.value == "queued" and got.record["attempt"] == 1
        assert len(store.claim(["render"], now=T0 + 100 * n + 50, runner_id="w", limit=5)) == 1


@pytest.mark.parametrize("gated", [True, False])
def test_create_many_decides_each_record_as_create_does_in_one_batch(store, gated):
    # with a gate the batch's rows are locked first; without one, PostgreSQL
    # inserts first and decides only the records whose job exists
    (live,) = queued(store)
    (done,) = queued(store, at=T0 + 1)
    store.claim(["render"], now=T0 + 2, runner_id="w", limit=2)
    assert finish_ok(store, done, 1)  # only the older one was claimed first: check it
    assert store.get(live).status.value == "running"
    fresh = [record(at=T0 + 10 + i) for i in range(3)]
    batch = [record(live, at=T0 + 20), *fresh, record(done, at=T0 + 21, params={"n": 9})]
    seen = []
    out = store.create_many(
        batch,
        claimable=[True, True, False, True, True],
        admit=(lambda pos: seen.append(pos)) if gated else None,
    )
    assert [created for _, created in out] == [False, True, True, True, True]
    # the gate sees what will be written, live ones left out
    assert seen == ([[1, 2, 3, 4]] if gated else [])
    assert out[0][0].status.value == "running" and out[0][0].record["created_at"] == T0
    assert store.get(done).record["attempt"] == 1 and store.get(done).record["params"] == {"n": 9}
    claimed = store.claim(["render"], now=T0 + 100, runner_id="w", limit=10)
    assert sorted(r.record["job_id"] for r in claimed) == sorted(
        [fresh[0]["job_id"], fresh[2]["job_id"], done]
    )  # the unclaimable one stays for its own process


def test_create_many_refused_by_admit_writes_nothing(store):
    (live,) = queued(store)
    before = sorted(store.iter_ids())

    def refuse(positions):
        raise RuntimeError("over budget")

    with pytest.raises(RuntimeError, match="over budget"):
        store.create_many([record(live), record(), record()], claimable=[True] * 3, admit=refuse)
    assert sorted(store.iter_ids()) == before
    with pytest.raises(ValueError, match="distinct"):
        rec = record()
        store.create_many([rec, dict(rec)], claimable=[True, True])
    assert sorted(store.iter_ids()) == before


def test_overlapping_batches_in_threads_create_each_job_once(store):
    ids = [jid() for _ in range(40)]
    results: list[tuple[str, bool]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def go(k):
        mine = ids[k * 8 : k * 8 + 16]  # each batch overlaps the next one by half
        if k % 2:
            mine = mine[::-1]  # and in the opposite order
        barrier.wait()
        batch = [record(i, run_id=f"run-{k}-{i}") for i in mine]  # run ids are unique
        out = store.create_many(batch, claimable=[True] * len(mine))
        with lock:
            results.extend((row.record["job_id"], created) for row, created in out)

    threads = [threading.Thread(target=go, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    created = Counter(job_id for job_id, made in results if made)
    assert sorted(created) == sorted(set(ids) & {j for j, _ in results})
    assert set(created.values()) == {1}  # every job created by exactly one batch
    assert len(store.claim(["render"], now=T0 + 1, runner_id="w", limit=100)) == len(created)


def test_a_workers_refill_claims_in_a_finished_slot_only_after_the_finish_committed(store, reader):
    a, b, c = queued(store, 3)
    store.claim(["render"], now=T0 + 1, runner_id="w", limit=1)
    seen = []

    def take(rows, asked):  # another connection must already see the finish
        seen.append(([r.record["job_id"] for r in rows], reader.get(a).status.value, asked))

    asked = []

    def want(ids):
        asked.append(list(ids))
        return 2

    store.refill = Refill(
        kinds=lambda: ["render"], runner_id="w2", want=want, take=take, clock=lambda: T0 + 2
    )
    assert finish_ok(store, a, 1)
    if type(store).__name__ == "SqliteJobStore":  # a claim there is no round trip: no refill
        assert seen == [] and asked == []
        return
    assert asked == [[a]] and seen == [([b, c], "succeeded", 2)]
    for job_id in (b, c):
        got = store.get(job_id)
        assert got.status.value == "running" and got.record["runner_id"] == "w2"
        assert got.record["attempt"] == 1
    store.refill = None
    assert finish_ok(store, b, 1) and store.get(c).status.value == "running"


# ----- start and claim ----------------------------------------------------------------------
def test_start_moves_a_queued_job_to_running_once(store):
    (a,) = queued(store, claimable=False)
    row = store.start(a, now=T0 + 1, runner_id="proc-1")
    assert row.status.value == "running"
    assert row.record["attempt"] == 1 and row.record["started_at"] == T0 + 1
    assert row.record["heartbeat_at"] == T0 + 1 and row.record["runner_id"] == "proc-1"
    assert store.start(a, now=T0 + 2, runner_id="proc-2") is None
    assert store.start(jid(), now=T0 + 2, runner_id="proc-2") is None
    assert store.get(a).record["runner_id"] == "proc-1"
    assert store.get_status(a).status is ComputationStatus.RUNNING


def test_start_refuses_a_cancelled_job(store):
    (a,) = queued(store, claimable=False)
    store.request_cancel(a, now=T0 + 1)
    assert store.start(a, now=T0 + 2, runner_id="p") is None
    assert store.get(a).status.value == "cancelled"


def test_claim_takes_the_oldest_due_jobs_in_one_batch(store):
    ids = queued(store, 5)
    got = store.claim(["render"], now=T0 + 10, runner_id="w", limit=3)
    assert [r.record["job_id"] for r in got] == ids[:3]
    assert all(r.status.value == "running" and r.record["attempt"] == 1 for r in got)
    assert all(r.record["runner_id"] == "w" and r.record["started_at"] == T0 + 10 for r in got)
    rest = store.claim(["render"], now=T0 + 10, runner_id="w", limit=10)
    assert [r.record["job_id"] for r in rest] == ids[3:]
    assert store.claim(["render"], now=T0 + 10, runner_id="w", limit=10) == []


def test_claim_filters_by_kind_and_due_time_and_claimability(store):
    (img,) = queued(store, kind="image", at=T0)
    (vid,) = queued(store, kind="video", at=T0 + 1)
    (local,) = queued(store, kind="image", claimable=False, at=T0 + 2)
    (late,) = queued(store, kind="image", at=T0 + 50)
    assert store.claim([], now=T0 + 100, runner_id="w") == []
    assert store.claim(["image"], now=T0 + 100, runner_id="w", limit=0) == []
    assert store.claim(["audio"], now=T0 + 100, runner_id="w", limit=9) == []
    assert [r.record["job_id"] for r in store.claim(["image"], now=T0 + 10, runner_id="w")] == [img]
    assert store.claim(["image"], now=T0 + 10, runner_id="w", limit=9) == []
    got = store.claim(["image", "video"], now=T0 + 60, runner_id="w", limit=9)
    assert [r.record["job_id"] for r in got] == [vid, late]
    assert store.get(local).status.value == "queued"


def test_a_cancelled_job_is_never_claimed(store):
    a, b = queued(store, 2)
    store.request_cancel(a, now=T0 + 1)
    got = store.claim(["render"], now=T0 + 10, runner_id="w", limit=5)
    assert [r.record["job_id"] for r in got] == [b]


def test_concurrent_claims_never_hand_out_a_job_twice(store):
    ids = set(queued(store, 120))
    claimed: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(4)

    def worker(n):
        barrier.wait()
        while True:
            rows = store.claim(["render"], now=T0 + 1000, runner_id=f"w{n}", limit=7)
            if not rows:
                return
            with lock:
                claimed.extend(r.record["job_id"] for r in rows)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Counter(claimed).most_common(1)[0][1] == 1
    assert set(claimed) == ids


# ----- fenced writes --------------------------------------------------------------------------
def test_patch_is_fenced_by_attempt(store):
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w")
    assert store.patch(a, {"stage_index": 2, "note": {"x": [1, 2]}}, attempt=1)
    assert not store.patch(a, {"stage_index": 9}, attempt=0)
    assert not store.patch(a, {"stage_index": 9}, attempt=2)
    assert store.patch(a, {"fraction": 0.5}, attempt=None)
    assert not store.patch(jid(), {"fraction": 0.5}, attempt=None)
    rec = store.get(a).record
    assert rec["stage_index"] == 2 and rec["note"] == {"x": [1, 2]} and rec["fraction"] == 0.5
    assert rec["params"] == {"n": 1} and rec["attempt"] == 1


def test_patch_sets_columns_and_refuses_bad_field_names(store):
    (a,) = queued(store)
    assert store.patch(a, {"heartbeat_at": T0 + 7, "actor": {"id": "u9"}}, attempt=None)
    row = store.get(a)
    assert row.record["heartbeat_at"] == T0 + 7 and row.record["actor"] == {"id": "u9"}
    assert [r.record["job_id"] for r in store.page(actor_id="u9")] == [a]
    assert store.patch(a, {"pct_floor": None}, attempt=None)
    assert "pct_floor" in store.get(a).record and store.get(a).record["pct_floor"] is None
    with pytest.raises(ValueError):
        store.patch(a, {"bad name": 1}, attempt=None)


def test_finish_is_fenced_and_writes_status_and_record_together(store):
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w")
    assert not finish_ok(store, a, 0)
    assert store.get(a).status.value == "running"
    assert store.finish(
        a,
        au_status=ComputationStatus.FAILED,
        result=None,
        error="boom",
        fields={"finished_at": T0 + 5, "error": "boom", "error_kind": "crashed"},
        attempt=1,
    )
    row = store.get(a)
    assert row.status.value == "failed" and row.error == "boom"
    assert row.record["finished_at"] == T0 + 5 and row.record["error_kind"] == "crashed"
    status = store.get_status(a)
    assert status.status is ComputationStatus.FAILED and status.completed_at is not None


def test_finish_keeps_any_json_result(store):
    huge = {"seed": 2**70, "low": -(2**63) - 1, "digits": "7" * 30}  # past 64 bits: kept exact
    for value in ({"a": [1, 2.5, None, "x"]}, [1, 2], "text", 3, 0.25, True, huge):
        (a,) = queued(store)
        store.claim(["render"], now=T0 + 1, runner_id="w")
        assert store.finish(
            a,
            au_status=ComputationStatus.COMPLETED,
            result=value,
            error=None,
            fields={"finished_at": T0 + 2},
            attempt=1,
        )
        assert store.get(a).result == value and store.get_status(a).value == value
        assert type(store.get(a).result) is type(value)
    assert type(store.get(a).result["seed"]) is int and store.get(a).result["seed"] == 2**70


def test_requeue_is_fenced_and_makes_the_job_due_later(store):
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w")
    assert not store.requeue(a, fields={"error": "x"}, not_before=T0 + 20, attempt=0)
    assert store.requeue(
        a, fields={"error": "flaky", "error_kind": "crashed"}, not_before=T0 + 20, attempt=1
    )
    row = store.get(a)
    assert row.status.value == "queued" and row.record["error"] == "flaky"
    assert row.record["started_at"] is None and row.record["heartbeat_at"] is None
    assert row.record["attempt"] == 1
    assert store.claim(["render"], now=T0 + 10, runner_id="w") == []
    (again,) = store.claim(["render"], now=T0 + 20, runner_id="w2")
    assert again.record["attempt"] == 2 and again.record["runner_id"] == "w2"
    assert not finish_ok(store, a, 1)  # the first attempt's late write is refused
    assert finish_ok(store, a, 2)


def test_requeue_leaves_a_finished_attempt_finished(store):
    # A stopping worker reads a job running, then puts it back; meanwhile the
    # body's finish of that same attempt commits. The requeue must not undo
    # the committed result (the job would run again: a paid render twice).
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w")
    assert finish_ok(store, a, 1)
    assert not store.requeue(a, fields={"error": "stopped"}, not_before=T0 + 2, attempt=1)
    row = store.get(a)
    assert row.status.value == "succeeded" and row.result == {"ok": True}
    assert row.record.get("error") is None and row.record["finished_at"] == T0 + 100
    assert store.claim(["render"], now=T0 + 10, runner_id="w2") == []


# ----- cancel and beat ------------------------------------------------------------------------
def test_cancel_of_a_queued_job_closes_it_at_once(store):
    (a,) = queued(store)
    row = store.request_cancel(a, now=T0 + 3)
    assert row.status.value == "cancelled"
    assert row.record["finished_at"] == T0 + 3 and row.record["cancel_requested"] is True
    assert row.record["error_kind"] == "cancelled"
    assert store.get_status(a).status is ComputationStatus.CANCELLED
    assert store.live() == []


def test_cancel_of_a_running_job_flags_it_until_its_body_stops(store):
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w")
    row = store.request_cancel(a, now=T0 + 3)
    assert row.status.value == "cancelling" and row.record["finished_at"] is None
    assert store.get_status(a).status is ComputationStatus.CANCELLED
    assert store.request_cancel(a, now=T0 + 4).status.value == "cancelling"
    assert store.beat([a], now=T0 + 5, runner_id="w") == {a}
    # the body stops and writes its end; the intent flag keeps it "cancelled"
    assert finish_ok(store, a, 1, at=T0 + 6)
    assert store.get(a).status.value == "cancelled"


def test_cancel_leaves_a_finished_job_untouched(store):
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w")
    finish_ok(store, a, 1)
    before = store.get(a)
    after = store.request_cancel(a, now=T0 + 200)
    assert after.status.value == "succeeded" and after.record == before.record
    assert store.get(a).record == before.record and store.get(a).result == {"ok": True}
    assert store.request_cancel(jid(), now=T0) is None


def test_beat_stamps_the_runners_jobs_and_reports_cancels(store):
    a, b, c = queued(store, 3)
    store.register_runner("w", {"role": "worker"}, now=T0)
    store.claim(["render"], now=T0 + 5, runner_id="w", limit=2)
    store.claim(["render"], now=T0 + 5, runner_id="other", limit=1)
    assert store.beat([a, b, c], now=T0 + 9, runner_id="w") == {c}  # c is not w's to run
    assert store.get(a).record["heartbeat_at"] == T0 + 9
    assert store.get(c).record["heartbeat_at"] == T0 + 5  # another runner's job
    store.request_cancel(b, now=T0 + 10)
    assert store.beat([a, b], now=T0 + 11, runner_id="w") == {b}
    assert store.beat([], now=T0 + 12, runner_id="w") == set()
    (runner,) = store.runners()
    assert runner["beat_at"] == T0 + 12


def test_beat_tells_a_runner_to_stop_cancelled_finished_and_lost_jobs(store):
    # Given four jobs runner w started
    keep, cancelled, finished, lost = queued(store, 4)
    store.claim(["render"], now=T0 + 5, runner_id="w", limit=4)
    # When one is cancelled, one finished (e.g. reaped and closed), and one is
    # reaped, requeued and claimed by another runner
    store.request_cancel(cancelled, now=T0 + 6)
    assert finish_ok(store, finished, 1, at=T0 + 7)
    assert store.requeue(lost, fields={"error": "reaped"}, not_before=T0 + 8, attempt=1)
    (other,) = store.claim(["render"], now=T0 + 9, runner_id="w2")
    assert other.record["job_id"] == lost
    # Then its beat names exactly those three, and stamps only what it still holds
    assert store.beat([keep, cancelled, finished, lost], now=T0 + 10, runner_id="w") == {
        cancelled,
        finished,
        lost,
    }
    assert store.get(keep).record["heartbeat_at"] == T0 + 10
    assert store.get(lost).record["heartbeat_at"] == T0 + 9
    assert store.get(finished).record["heartbeat_at"] == T0 + 5
    # and the new holder's beat reports nothing
    assert store.beat([lost], now=T0 + 11, runner_id="w2") == set()


# ----- reads -----------------------------------------------------------------------------------
def test_page_is_newest_first_with_a_limit(store):
    ids = queued(store, 6)
    assert [r.record["job_id"] for r in store.page(limit=4)] == ids[::-1][:4]
    assert list(store.iter_ids()) == ids[::-1]


_AU = ("pending", "running", "completed", "failed", "cancelled")


def test_the_status_filter_agrees_with_job_status_for_every_combination(store):
    # Given one job for every (au status, cancel intent, finished) combination
    expected: dict[str, set[str]] = {}
    for n, (au, cancel, finished) in enumerate(
        itertools.product(_AU, (False, True), (False, True))
    ):
        job_id = jid()
        store.put_record(
            record(
                job_id,
                at=T0 + n,
                cancel_requested=cancel,
                finished_at=T0 + 99 if finished else None,
            )
        )
        store.put_status(job_id, ComputationResult(None, ComputationStatus(au)))
        want = job_status(au, cancel_requested=cancel, finished=finished).value
        expected.setdefault(want, set()).add(job_id)
        assert store.get(job_id).status.value == want
    # Then every status filter returns exactly the jobs that read as that status
    for status in ("queued", "running", "cancelling", "succeeded", "failed", "cancelled"):
        got = {r.record["job_id"] for r in store.page(status=status, limit=100)}
        assert got == expected.get(status, set()), status
        assert all(r.status.value == status for r in store.page(status=status, limit=100))


def test_the_status_filter_follows_transitions(store):
    a, b, c, d = queued(store, 4)
    store.claim(["render"], now=T0 + 10, runner_id="w", limit=3)  # a, b, c running
    finish_ok(store, a, 1)
    store.request_cancel(b, now=T0 + 2)
    store.request_cancel(d, now=T0 + 2)

    def ids(status):
        return {r.record["job_id"] for r in store.page(status=status)}

    assert ids("succeeded") == {a} and ids("cancelling") == {b}
    assert ids("running") == {c} and ids("cancelled") == {d} and ids("queued") == set()


def test_page_filters_by_actor(store):
    mine = [
        store.create(record(at=T0 + i, actor={"id": "u1"}), claimable=True)[0] for i in range(3)
    ]
    store.create(record(at=T0 + 10, actor={"id": "u2", "handle": "bo"}), claimable=True)
    store.create(record(at=T0 + 11), claimable=True)
    got = store.page(actor_id="u1")
    assert [r.record["job_id"] for r in got] == [r.record["job_id"] for r in mine][::-1]
    assert store.page(actor_id="u1", status="running") == []
    assert len(store.page(actor_id="u1", status="queued", limit=2)) == 2
    assert store.page(actor_id="nobody") == []


def test_live_is_every_unfinished_job_oldest_first(store):
    a, b, c, d = queued(store, 4)
    store.claim(["render"], now=T0 + 1, runner_id="w", limit=2)  # a, b
    finish_ok(store, a, 1)
    store.request_cancel(b, now=T0 + 2)  # cancelling: still live
    store.request_cancel(d, now=T0 + 2)  # queued -> cancelled: not live
    assert [r.record["job_id"] for r in store.live()] == [b, c]


def test_live_without_claimable_leaves_out_the_jobs_queued_for_a_worker(store):
    # Given a running job, a job queued for workers and one queued in-process
    a, b = queued(store, 2)
    (mine,) = queued(store, 1, claimable=False, at=T0 + 1)
    store.claim(["render"], now=T0 + 2, runner_id="w", limit=1)  # a
    # Then a reaper's read leaves out only the claimable one (no worker holds it)
    assert [r.record["job_id"] for r in store.live(claimable=False)] == [a, mine]
    assert [r.record["job_id"] for r in store.live()] == [a, b, mine]


def test_a_status_entry_is_written_only_for_a_job_in_the_store(store):
    # A job's au status entry belongs to its record: none is made up for a job
    # the store does not have (au's view raises KeyError, as for a read).
    (a,) = queued(store, 1)
    store.put_status(a, ComputationResult({"x": 1}, ComputationStatus.COMPLETED))
    assert store.get_status(a).value == {"x": 1}
    stranger = jid()
    with pytest.raises(KeyError, match=stranger):
        store.put_status(stranger, ComputationResult(None, ComputationStatus.COMPLETED))
    assert store.get_status(stranger) is None and store.get(stranger) is None
    with pytest.raises(KeyError):
        store.status[stranger] = ComputationResult(None, ComputationStatus.PENDING)


def test_the_au_status_entry_is_the_job_rows_own(store):
    # Given a claimed job (attempt 1) and another one queued
    a, b = queued(store, 2)
    store.claim(["render"], now=T0 + 1, runner_id="w", limit=1)
    # When au's view writes a's entry whole
    done = datetime(2030, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    store.status[a] = ComputationResult(
        {"k": "ü ✓"},
        ComputationStatus.CANCELLED,
        error=Exception("why not"),
        completed_at=done,
        terminal_reason="stopped by a test",
    )
    # Then the view reads every part back from the job's row: created when the
    # job was, at the job's attempt
    got = store.status[a]
    assert (got.status, got.value, str(got.error), got.terminal_reason) == (
        ComputationStatus.CANCELLED,
        {"k": "ü ✓"},
        "why not",
        "stopped by a test",
    )
    assert got.completed_at == done and got.metadata == {"attempt": 1}
    assert got.created_at.timestamp() == store.get(a).record["created_at"] == T0
    # And the job's own reads see it; the queued one is untouched and claimable
    assert store.get(a).result == {"k": "ü ✓"} and store.get(a).error == "why not"
    assert store.status[b].status is ComputationStatus.PENDING
    assert [r.record["job_id"] for r in store.claim(["render"], now=T0 + 2, runner_id="w")] == [b]


def test_reads_of_unknown_jobs(store):
    assert store.get(jid()) is None
    assert store.get_status(jid()) is None
    assert store.progress(jid(), limit=5) == []
    assert store.page() == [] and store.live() == [] and list(store.iter_ids()) == []


# ----- learning, progress, runners, spend --------------------------------------------------------
def test_samples_keep_the_newest_window_oldest_first(store):
    for i in range(6):
        store.add_samples({"m|op": float(i), "image": 10.0 + i}, now=T0 + i, window=4)
    got = store.samples(["m|op", "image", "cold"], window=4)
    assert got == {"m|op": [2.0, 3.0, 4.0, 5.0], "image": [12.0, 13.0, 14.0, 15.0], "cold": []}
    assert store.samples(["m|op"], window=2) == {"m|op": [4.0, 5.0]}


def test_progress_trail_is_fenced_ordered_and_limited(store):
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w")
    for i in range(5):
        beat = {"ts": T0 + i, "pct": 10.0 * i, "message": f"step {i}", "stage": {"i": i}}
        assert store.append_progress(a, beat, attempt=1)
    assert not store.append_progress(a, {"ts": T0 + 9, "pct": 99.0}, attempt=0)
    assert not store.append_progress(jid(), {"ts": T0 + 9}, attempt=None)
    trail = store.progress(a, limit=3)
    assert [b["message"] for b in trail] == ["step 2", "step 3", "step 4"]
    assert trail[-1] == {
        "ts": T0 + 4,
        "pct": 40.0,
        "message": "step 4",
        "stage": {"i": 4},
        "attempt": 1,
    }
    assert store.append_progress(a, {"ts": T0 + 10}, attempt=None)
    assert store.progress(a, limit=1)[0]["pct"] is None


def test_runners_register_and_unregister(store):
    store.register_runner("w1", {"role": "worker", "host": "h1", "pid": 1}, now=T0)
    store.register_runner("w2", {"role": "inproc", "wake": None}, now=T0 + 1)
    got = {r["runner_id"]: r for r in store.runners()}
    assert got["w1"]["host"] == "h1" and got["w1"]["started_at"] == T0
    assert got["w2"]["beat_at"] == T0 + 1
    store.unregister_runner("w1")
    assert [r["runner_id"] for r in store.runners()] == ["w2"]


def test_beat_runner_stamps_the_runner_and_reads_every_runner(store):
    # Given two announced runners
    store.register_runner("w1", {"role": "worker", "host": "h1"}, now=T0)
    store.register_runner("w2", {"role": "worker", "host": "h2"}, now=T0 + 1)
    # When w1 beats and reads, in one call
    got = {r["runner_id"]: r for r in store.beat_runner("w1", now=T0 + 7)}
    # Then it reads both, its own beat as written and the other's as stored
    assert set(got) == {"w1", "w2"}
    assert got["w1"]["beat_at"] == T0 + 7 and got["w1"]["host"] == "h1"
    assert got["w2"]["beat_at"] == T0 + 1 and got["w2"]["started_at"] == T0 + 1
    # and what it read is what a plain read sees afterwards
    assert sorted(store.runners(), key=lambda r: r["runner_id"]) == [got["w1"], got["w2"]]


def test_a_runners_beat_never_moves_back(store):
    # A worker beats from two threads (its beat thread, and claims carrying the
    # beat): one whose time was read earlier may commit later. Given a beat at T0 + 10
    store.register_runner("w1", {"role": "worker"}, now=T0)
    store.beat_runner("w1", now=T0 + 10)
    # When beats read at T0 + 4 commit after it, by each path that beats
    store.beat_runner("w1", now=T0 + 4)
    store.beat([], now=T0 + 5, runner_id="w1")
    store.claim_and_beat(["render"], now=T0 + 6, runner_id="w1")
    # Then the runner still reads as beating at T0 + 10, not six seconds earlier
    assert [r["beat_at"] for r in store.runners()] == [T0 + 10]
    assert [r["beat_at"] for r in store.beat_runner("w1", now=T0 + 7)] == [T0 + 10]


def test_claim_and_beat_claims_as_claim_does_and_beats_where_it_can(store):
    # Given a runner and three queued jobs
    store.register_runner("w1", {"role": "worker", "host": "h1"}, now=T0)
    a, b, _c = queued(store, 3)
    # When it claims two of them with its beat
    rows, runners = store.claim_and_beat(["render"], now=T0 + 7, runner_id="w1", limit=2)
    # Then it holds the two oldest, started, as a claim would have them
    assert [r.record["job_id"] for r in rows] == [a, b]
    assert all(r.record["runner_id"] == "w1" and r.record["attempt"] == 1 for r in rows)
    assert [store.get(j).status.value for j in (a, b)] == ["running"] * 2
    if type(store).__name__ == "PostgresJobStore":
        # and PostgreSQL beat in the same round trip: the read says so, and so does the table
        assert [(r["runner_id"], r["beat_at"]) for r in runners] == [("w1", T0 + 7)]
        assert [r["beat_at"] for r in store.runners()] == [T0 + 7]
    else:  # the embedded store has no round trips to save: the caller beats as usual
        assert runners is None
        assert [r["beat_at"] for r in store.runners()] == [T0]
    # and nothing to claim still beats, nothing asked for claims nothing
    rows, _ = store.claim_and_beat(["other"], now=T0 + 8, runner_id="w1", limit=2)
    assert rows == []
    assert store.claim_and_beat(["render"], now=T0 + 9, runner_id="w1", limit=0) == ([], None)


def test_spend_sums_finished_actuals_and_live_estimates(store):
    assert store.spend() == {
        "actual_usd": 0.0,
        "live_estimated_usd": 0.0,
        "live_unknown": 0,
        "lower_bound": False,
    }
    a, b = queued(store, 2)
    store.create(record(at=T0 + 5, estimated_usd=0.75), claimable=True)
    store.create(record(at=T0 + 6, estimated_usd=0.25), claimable=True)
    store.claim(["render"], now=T0 + 10, runner_id="w", limit=2)  # a, b
    store.finish(
        a,
        au_status=ComputationStatus.COMPLETED,
        result=None,
        error=None,
        fields={"finished_at": T0 + 11, "actual_usd": 1.5, "actual_is_lower_bound": False},
        attempt=1,
    )
    spend = store.spend()
    assert spend["actual_usd"] == 1.5 and spend["lower_bound"] is False
    assert spend["live_estimated_usd"] == 1.0 and spend["live_unknown"] == 1  # b has none
    store.finish(
        b,
        au_status=ComputationStatus.FAILED,
        result=None,
        error="x",
        fields={"finished_at": T0 + 12, "actual_usd": 0.5},  # lower bound unreported
        attempt=1,
    )
    spend = store.spend()
    assert spend["actual_usd"] == 2.0 and spend["lower_bound"] is True
    assert spend["live_unknown"] == 0


def test_a_patch_replaces_top_level_fields_whatever_their_values(store):
    # Given a job whose record holds an object, a list and a string
    (a,) = queued(store)
    store.patch(a, {"stage": {"name": "x", "i": 1}, "tags": [1, 2], "note": "n"}, attempt=None)
    # When a patch sets them again (null among them) and adds scalars
    fields = {"stage": {"name": "y"}, "tags": [3], "note": None, "pct": 5.5, "ok": True}
    assert store.patch(a, fields, attempt=None)
    # Then each is replaced whole (an object is not merged, a null is kept as null)
    rec = store.get(a).record
    assert rec["stage"] == {"name": "y"} and rec["tags"] == [3]
    assert "note" in rec and rec["note"] is None
    assert rec["pct"] == 5.5 and rec["ok"] is True and rec["label"] == "render"
    # And columns are set, and cleared by a null, alike
    assert store.patch(a, {"heartbeat_at": T0 + 5, "finished_at": T0 + 6}, attempt=None)
    assert store.get(a).record["finished_at"] == T0 + 6
    assert store.patch(a, {"finished_at": None, "heartbeat_at": None}, attempt=None)
    rec = store.get(a).record
    assert rec["finished_at"] is None and rec["heartbeat_at"] is None
    assert [r.record["job_id"] for r in store.live()] == [a]


# ----- the two views --------------------------------------------------------------------------
def test_the_index_is_a_dol_mapping_of_records(store):
    index = store.index
    a = jid()
    index[a] = record(a, at=T0 + 1, label="hello")
    assert a in index and index[a]["label"] == "hello"
    assert store.get(a).status.value == "queued"
    index[a] = {**index[a], "label": "again"}
    assert index[a]["label"] == "again" and list(index) == [a]
    assert jid() not in index and 42 not in index
    with pytest.raises(KeyError):
        index[jid()]
    del index[a]
    assert a not in index and store.get_status(a) is None
    with pytest.raises(KeyError):
        del index[a]


def test_the_status_store_is_an_au_computation_store(store):
    status = store.status
    (a,) = queued(store)
    assert status[a].status is ComputationStatus.PENDING and a in list(status)
    done = ComputationResult(
        {"v": 1},
        ComputationStatus.COMPLETED,
        created_at=datetime(2024, 1, 1, tzinfo=UTC),
        completed_at=datetime(2024, 1, 1, 0, 1, tzinfo=UTC),
        terminal_reason="done",
    )
    status[a] = done
    got = status[a]
    assert got.status is ComputationStatus.COMPLETED and got.value == {"v": 1}
    assert got.terminal_reason == "done" and got.completed_at == done.completed_at
    assert store.get(a).status.value == "succeeded"
    assert store.claim(["render"], now=T0 + 10, runner_id="w") == []
    with pytest.raises(KeyError):
        status[jid()]
    assert len(status) == 1
    del status[a]
    assert store.get(a) is None


def test_the_runtime_backend_reads_status_through_the_status_view(store):
    # Given a runtime on the store (its au backend's ComputationStore is store.status)
    from nw.jobs.core.model import JobsConfig
    from nw.jobs.execution.runtime import Runtime

    (a,) = queued(store)
    rt = Runtime(store, JobsConfig())
    try:
        # Then the backend reads each transition the store writes
        assert rt.backend.store[a].status is ComputationStatus.PENDING
        store.claim(["render"], now=T0 + 1, runner_id="w")
        assert rt.backend.store[a].status is ComputationStatus.RUNNING
        with pytest.raises(KeyError):
            rt.backend.store[jid()]
    finally:
        rt.close()


# ----- waking idle workers ----------------------------------------------------------------------
def test_a_claimable_create_wakes_a_listening_worker_and_an_owned_one_does_not(store):
    # Given an idle worker listening, announced in the runners table
    listener = store.wake_listener(f"w-{uuid.uuid4().hex}")
    try:
        store.register_runner("w", {"role": "worker", "wake": listener.address}, now=T0)
        listener.wait(0)  # nothing pending yet
        # When a job only this process may run is created, the worker sleeps on
        store.create(record(), claimable=False)
        assert listener.wait(0.3) is False
        # When a claimable job is created, the worker wakes (no second call needed)
        store.create(record(), claimable=True)
        assert listener.wait(5.0) is True
        # And the explicit hook wakes it too
        store.wake_workers()
        assert listener.wait(5.0) is True
    finally:
        listener.close()


def test_a_read_only_handle_refuses_writes(store, reader):
    (a,) = queued(store)
    assert reader.get(a).status.value == "queued"
    assert [r.record["job_id"] for r in reader.page()] == [a]
    with pytest.raises(JobStoreError):
        reader.create(record(), claimable=True)
    with pytest.raises(JobStoreError):
        reader.patch(a, {"x": 1}, attempt=None)
    with pytest.raises(JobStoreError):
        reader.beat_runner("w", now=T0)
    reader.close()


# ----- history: pages, attempts, prune, totals, metrics ------------------------------------
def test_the_grade_filter_agrees_with_to_job_for_every_ending(store):
    from nw.jobs.core.records import outcome_of

    # Given one job for every way a job can end (and a live one)
    endings = [
        ("completed", False, {}, {"ok": 1}),  # ok
        ("completed", False, {}, []),  # warning: empty result
        ("completed", True, {"error_kind": "cancelled"}, {"ok": 1}),  # notice
        ("failed", False, {"error": "boom", "error_kind": "crashed"}, None),  # error
        ("failed", False, {"error": "no", "error_kind": "refused"}, None),  # warning
        ("cancelled", True, {"error": "cancelled on request", "error_kind": "cancelled"}, None),
        (
            "cancelled",
            True,
            {
                "error": "worker lost before the body stopped; cancelled on request",
                "error_kind": "cancelled",
            },
            None,
        ),
        ("cancelled", False, {"error": "worker lost; x", "error_kind": "crashed"}, None),
        ("running", False, {}, None),  # live: no grade
    ]
    expected: dict[str | None, set[str]] = {}
    for n, (au, cancel, fields, value) in enumerate(endings):
        job_id = jid()
        live = au == "running"
        store.put_record(
            record(
                job_id,
                at=T0 + n,
                cancel_requested=cancel,
                started_at=T0 + n,
                finished_at=None if live else T0 + 99,
                **fields,
            )
        )
        store.put_status(job_id, ComputationResult(value, ComputationStatus(au)))
        expected.setdefault(outcome_of(store.get(job_id))[2], set()).add(job_id)
    assert set(expected) == {"ok", "warning", "notice", "error", None}
    # Then each grade filter returns exactly the jobs that read with that grade
    for grade in ("ok", "notice", "warning", "error"):
        got = {r.record["job_id"] for r in store.page(grade=grade, limit=100)}
        assert got == expected[grade], grade
    # And the counts agree with them, by status and grade
    counted = {(r["state"], r["grade"]): r["n"] for r in store.counts()}
    assert sum(counted.values()) == len(endings)
    assert sum(n for (_, g), n in counted.items() if g == "error") == len(expected["error"])


def test_a_cursor_walks_every_job_once_whatever_the_ties(store):
    # Given jobs created at three instants, several at each (ties broken by id)
    ids = [
        store.create(record(at=T0 + i // 3), claimable=True)[0].record["job_id"] for i in range(8)
    ]
    order = [r.record["job_id"] for r in store.page(limit=100)]
    assert sorted(order) == sorted(ids)
    # When walking three at a time from each page's last job
    walked, cursor = [], None
    while True:
        page = store.page(before=cursor, limit=3)
        walked += [r.record["job_id"] for r in page]
        if len(page) < 3:
            break
        last = page[-1].record
        cursor = (last["created_at"], last["job_id"])
    # Then every job comes once, newest first, as one page shows them
    assert walked == order


def test_page_filters_by_kind_and_label_text_together_with_the_others(store):
    a = store.create(record(kind="paint", at=T0, label="Cover Art"), claimable=True)[0]
    store.create(record(kind="paint", at=T0 + 1, label="Back page"), claimable=True)
    c = store.create(record(kind="voice", at=T0 + 2, label="cover voice"), claimable=True)[0]
    store.create(record(kind="voice", at=T0 + 3, actor={"id": "u1"}, label="x"), claimable=True)

    def ids(**filters):
        return [r.record["job_id"] for r in store.page(limit=100, **filters)]

    assert ids(q="COVER") == [c.record["job_id"], a.record["job_id"]]
    assert ids(kind="paint", q="cover") == [a.record["job_id"]]
    assert len(ids(kind="voice")) == 2 and ids(kind="voice", actor_id="u1", q="cover") == []
    assert (
        ids(kind="paint", status="running") == [] and len(ids(kind="paint", status="queued")) == 2
    )
    assert ids(q="100%") == []  # a LIKE wildcard is a character like any other


def test_a_claim_records_the_attempt_with_the_runners_host_and_pid(store):
    (job_id,) = queued(store)
    store.register_runner("w1", {"role": "worker", "host": "h1", "pid": 42}, now=T0)
    (row,) = store.claim(["render"], now=T0 + 10, runner_id="w1")
    assert row.record["attempts"] == [
        {
            "attempt": 1,
            "lease": 1,
            "runner_id": "w1",
            "host": "h1",
            "pid": 42,
            "started_at": T0 + 10,
        }
    ]
    store.requeue(job_id, fields={}, not_before=T0, attempt=1)
    (again,) = store.claim(["render"], now=T0 + 20, runner_id="w2")  # not announced
    second = again.record["attempts"][1]
    assert second["attempt"] == 2 and second["lease"] == 2 and second["host"] is None


def test_prune_keeps_spend_and_counts_and_leaves_live_jobs(store):
    # Given finished jobs that spent, one old enough to prune, and a live one
    old, new, live = queued(store, 3)
    store.claim(["render"], now=T0 + 10, runner_id="w", limit=2)
    for job_id, at, usd in ((old, T0 + 20, 1.25), (new, T0 + 5000, 0.5)):
        store.finish(
            job_id,
            au_status=ComputationStatus.COMPLETED,
            result={"ok": True},
            error=None,
            fields={"finished_at": at, "actual_usd": usd, "actual_is_lower_bound": False},
            attempt=1,
        )
    store.append_progress(old, {"ts": T0 + 15, "pct": 50.0}, attempt=1)
    spend, counts = store.spend(), _by_key(store.counts())
    week = store.spend_since(since=T0, today=T0 + 4000)
    # When pruning what finished before T0 + 1000
    assert store.prune(cutoff=T0 + 1000) == 1
    # Then that job is gone (record, status, trail), the others are there,
    # and spend, counts and the week's spend read the same
    assert store.get(old) is None and store.get_status(old) is None
    assert store.progress(old, limit=10) == []
    assert store.get(new) is not None and store.get(live).status.value == "queued"
    assert store.spend() == spend
    assert _by_key(store.counts()) == counts  # the pruned job is counted in the rollup
    assert _usd(store.spend_since(since=T0, today=T0 + 4000)) == _usd(week) == 1.75
    assert store.prune(cutoff=T0 + 1000) == 0  # nothing left to prune, nothing doubled
    assert store.spend() == spend


def _by_key(rows):
    out: Counter = Counter()
    for r in rows:
        out[(r["state"], r["grade"])] += r["n"]
    return out


def _usd(rows):
    return round(sum(r["usd"] for r in rows), 6)


def test_durations_count_finished_jobs_that_ran_by_kind(store):
    a, b = queued(store, 2)
    queued(store, kind="other")  # never ran: not counted
    store.claim(["render"], now=T0 + 10, runner_id="w", limit=2)
    finish_ok(store, a, 1, at=T0 + 12)  # 2 s
    finish_ok(store, b, 1, at=T0 + 50)  # 40 s
    bounds = [1.0, 2.0, 5.0, 10.0, 30.0, 40.0, 60.0, 120.0, 600.0, 3600.0]
    got = store.durations(bounds)
    buckets = dict(zip(bounds, [0, 1, 1, 1, 1, 2, 2, 2, 2, 2], strict=True))  # le is <=
    assert got == {"render": {"count": 2, "seconds": 42.0, "buckets": buckets}}
    with pytest.raises(ValueError, match="takes 10 bounds"):
        store.durations([5.0, 60.0])
