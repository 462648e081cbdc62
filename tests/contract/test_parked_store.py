"""The store's part in parked jobs (stores/parking.py), on both engines: a park is
fenced by the attempt, a look's lease keeps another poller off a job, a put-back
moves its next look, and a webhook is kept for a park not yet recorded."""

from __future__ import annotations

import pytest

from nw.jobs.stores.parking import Park, Repark
from tests.contract.test_store_contract import T0, queued


def running(store, kind="render"):
    (job_id,) = queued(store, kind=kind)
    (row,) = store.claim([kind], limit=1, now=T0 + 1, runner_id="w1")
    assert row.record["job_id"] == job_id
    return row.record


def park(store, rec, *, due=T0 + 2, request_id="req-1", deadline=None):
    fields = {"parked": {"provider": "fake", "request_id": request_id, "since": T0 + 1}}
    p = Park(rec["job_id"], rec["attempt"], rec["kind"], request_id, due, deadline, fields)
    return store.park(p, now=T0 + 1)


def test_a_park_is_fenced_by_the_attempt_and_a_look_takes_a_due_job_once(store):
    rec = running(store)
    assert park(store, {**rec, "attempt": rec["attempt"] + 1}) is False  # another attempt's
    assert store.look_parked(["render"], now=T0 + 5, look_s=30, limit=10) == []
    assert park(store, rec) is True
    assert store.get(rec["job_id"]).record["parked"]["request_id"] == "req-1"
    # not due yet
    assert store.look_parked(["render"], now=T0 + 1.5, look_s=30, limit=10) == []
    # due: taken once, and under its lease no other look takes it
    (look,) = store.look_parked(["render"], now=T0 + 3, look_s=30, limit=10)
    assert look.request_id == "req-1" and look.attempt == rec["attempt"] and look.polls == 0
    assert look.row.record["job_id"] == rec["job_id"]
    assert store.look_parked(["render"], now=T0 + 4, look_s=30, limit=10) == []
    assert store.look_parked(["other"], now=T0 + 40, look_s=30, limit=10) == []
    # the lease lapsed (its poller died): the next look takes it
    (again,) = store.look_parked(["render"], now=T0 + 40, look_s=30, limit=10)
    # put back: due at its next look, the lease let go
    store.repark([Repark(rec["job_id"], again.attempt, T0 + 50)], now=T0 + 41)
    assert store.look_parked(["render"], now=T0 + 45, look_s=30, limit=10) == []
    (later,) = store.look_parked(["render"], now=T0 + 50, look_s=30, limit=10)
    assert later.polls == 1
    assert store.parked_count() == 1


def test_a_cancel_or_a_deadline_makes_a_parked_job_due_at_once(store):
    rec = running(store)
    other = running(store)
    park(store, rec, due=T0 + 100)
    park(store, other, due=T0 + 100, request_id="req-2", deadline=T0 + 10)
    assert store.look_parked(["render"], now=T0 + 5, look_s=30, limit=10) == []
    store.request_cancel(rec["job_id"], now=T0 + 6)
    (look,) = store.look_parked(["render"], now=T0 + 7, look_s=30, limit=10)
    assert look.row.record["cancel_requested"] is True
    (late,) = store.look_parked(["render"], now=T0 + 11, look_s=30, limit=10)
    assert late.request_id == "req-2" and late.deadline_at == T0 + 10


def test_a_webhook_before_the_park_is_kept_for_it_and_one_for_another_attempt_is_not(store):
    rec = running(store)
    payload = {"status": "OK", "payload": {"video": "v"}}
    assert store.keep_webhook(rec["job_id"], rec["attempt"] + 1, payload, now=T0 + 1) == "ignored"
    assert store.keep_webhook("f" * 64, 1, payload, now=T0 + 1) == "ignored"
    assert store.keep_webhook(rec["job_id"], rec["attempt"], payload, now=T0 + 1) == "kept"
    assert store.look_parked(["render"], now=T0 + 2, look_s=30, limit=10) == []  # not parked yet
    park(store, rec, due=T0 + 100)  # the park keeps it, due at once
    (look,) = store.look_parked(["render"], now=T0 + 2, look_s=30, limit=10)
    assert look.webhook == payload
    # applied (put back with what it saw): dropped; a later one is noted and due
    store.repark([Repark(rec["job_id"], look.attempt, T0 + 100, seen=look.seen)], now=T0 + 3)
    assert store.look_parked(["render"], now=T0 + 4, look_s=30, limit=10) == []
    assert store.keep_webhook(rec["job_id"], rec["attempt"], {"status": "OK"}, now=T0 + 5) == (
        "noted"
    )
    (next_look,) = store.look_parked(["render"], now=T0 + 5, look_s=30, limit=10)
    assert next_look.webhook == {"status": "OK"}


def test_a_finished_job_is_never_looked_at_and_its_webhook_is_ignored(store):
    from au import ComputationStatus

    rec = running(store)
    park(store, rec)
    assert store.finish(
        rec["job_id"],
        au_status=ComputationStatus.COMPLETED,
        result={"ok": True},
        error=None,
        fields={"finished_at": T0 + 3, "parked": None},
        attempt=rec["attempt"],
    )
    assert store.look_parked(["render"], now=T0 + 5, look_s=30, limit=10) == []
    assert store.keep_webhook(rec["job_id"], rec["attempt"], {"x": 1}, now=T0 + 6) == "ignored"
    assert store.parked_count() == 0
    assert store.prune_parked(before=T0 + 10) == 1


@pytest.mark.parametrize("n", [5])
def test_two_looks_at_once_never_take_one_job_twice(store, n):
    import threading

    recs = [running(store) for _ in range(n)]
    for i, rec in enumerate(recs):
        park(store, rec, request_id=f"r{i}")
    taken: list[str] = []
    lock = threading.Lock()

    def look():
        got = store.look_parked(["render"], now=T0 + 3, look_s=30, limit=3)
        with lock:
            taken.extend(x.row.record["job_id"] for x in got)

    threads = [threading.Thread(target=look) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == sorted({r["job_id"] for r in recs})
