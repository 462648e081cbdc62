"""The stores' side of pipelines, called directly on both backends: links
written with a create, a dependent released by the end of its last upstream
(exactly once, also when two upstreams end at once in separate transactions),
a failure cancelling what waits below it (and ``allow_failure`` releasing),
and a finish written twice releasing nothing more."""

from __future__ import annotations

import threading
import time
import uuid

from au import ComputationStatus

from nw.jobs.core.model import JobsConfig
from nw.jobs.core.pipelines import Edge
from nw.jobs.core.records import to_job
from nw.jobs.stores.pipelines import Links, pipelines_of
from tests.contract.test_store_contract import record

KIND = "pipe"


def jid() -> str:
    return uuid.uuid4().hex + uuid.uuid4().hex


def linked(
    store, shape: dict[str, list[tuple[str, bool]]], *, here: tuple[str, ...] = ()
) -> dict[str, str]:
    """Jobs for ``shape`` (step -> [(upstream step, allow_failure)]) in one
    create: the roots claimable, the others waiting on their upstreams; the
    steps in ``here`` are the in-process tier's (their process starts them)."""
    ids = {name: jid() for name in shape}
    now = time.time()
    records = [
        record(
            ids[n],
            kind=KIND,
            at=now,
            step=n,
            after=[{"job_id": ids[u], "step": u, "allow_failure": a} for u, a in shape[n]],
            **({"runner": "inproc", "runner_id": "owner"} if n in here else {}),
        )
        for n in shape
    ]
    edges = [Edge(ids[up], ids[n], up, allow) for n, ups in shape.items() for up, allow in ups]
    links = Links(
        pipeline=None,
        steps=(),
        edges=edges,
        waiting=[ids[n] for n, ups in shape.items() if ups],
        now=now,
    )
    store.create_many(
        records,
        claimable=[not shape[n] for n in shape],
        also=pipelines_of(store).linker(links),
    )
    return ids


def claim_all(store) -> set[str]:
    return {
        r.record["job_id"]
        for r in store.claim([KIND], now=time.time() + 1, runner_id="t", limit=100)
    }


def end(store, row, status=ComputationStatus.COMPLETED) -> bool:
    return store.finish(
        row.record["job_id"],
        au_status=status,
        result={"done": row.record["job_id"]} if status is ComputationStatus.COMPLETED else None,
        error=None if status is ComputationStatus.COMPLETED else "broke",
        fields={"finished_at": time.time()},
        attempt=row.record["attempt"],
    )


def test_a_dependent_waits_for_every_upstream_and_is_released_once(store):
    ids = linked(store, {"a": [], "b": [], "c": [("a", False), ("b", False)]})
    assert claim_all(store) == {ids["a"], ids["b"]}  # c is not claimable yet
    got = store.get_many([ids["a"], ids["c"], jid(), ids["a"]])  # one read of several
    assert set(got) == {ids["a"], ids["c"]} and got[ids["c"]].record["step"] == "c"
    a, b = store.get(ids["a"]), store.get(ids["b"])
    assert end(store, a)
    assert claim_all(store) == set()  # b has not ended
    waiting = to_job(store.get(ids["c"]), time.time(), JobsConfig())
    assert waiting.waiting == "waiting: after a, b"  # what a list or a show says of it
    assert end(store, b) and end(store, b)  # written twice: released once, not twice
    released = to_job(store.get(ids["c"]), time.time(), JobsConfig())
    assert released.waiting is None and released.after == [ids["a"], ids["b"]]
    assert claim_all(store) == {ids["c"]}
    assert claim_all(store) == set()


def test_a_released_in_process_step_is_never_claimable(store):
    # Its process starts it (nw/jobs/execution/step_waits.py): released, it
    # says so, but a worker serving its kind finds nothing to claim.
    ids = linked(store, {"a": [], "b": [("a", False)], "c": [("a", False)]}, here=("b",))
    [a] = store.claim([KIND], now=time.time() + 1, runner_id="t", limit=100)
    assert end(store, a)
    assert claim_all(store) == {ids["c"]}  # b is released, yet no worker's
    b = store.get(ids["b"])
    assert b.record.get("released_at") is not None
    assert to_job(b, time.time(), JobsConfig()).waiting is None
    assert store.start(ids["b"], now=time.time(), runner_id="owner").record["job_id"] == ids["b"]


def test_two_upstreams_ending_at_once_release_their_dependent(store):
    """Each upstream's end in its own transaction, at the same moment: the
    one that ends last must see the other's, or the dependent waits forever."""
    if hasattr(store, "project_id"):  # a second handle: its own connection and group commit
        from nw.jobs.stores.postgres import PostgresJobStore

        other = PostgresJobStore(store.db.url, store.project_id)
    else:
        from nw.jobs.stores.sqlite import SqliteJobStore

        other = SqliteJobStore(store.path)
    for _ in range(10):
        ids = linked(store, {"a": [], "b": [], "c": [("a", False), ("b", False)]})
        claim_all(store)
        rows = [store.get(ids["a"]), store.get(ids["b"])]
        start = threading.Barrier(2)

        def finish(handle, row, start):
            start.wait()
            end(handle, row)

        threads = [
            threading.Thread(target=finish, args=(h, r, start))
            for h, r in zip((store, other), rows, strict=True)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert claim_all(store) == {ids["c"]}


def test_a_failure_cancels_what_waits_below_it_unless_allowed(store):
    shape = {
        "a": [],
        "b": [("a", False)],
        "c": [("b", False)],
        "d": [("a", True)],  # runs anyway
        "e": [("c", True)],  # c is cancelled: e runs anyway
    }
    ids = linked(store, shape)
    assert claim_all(store) == {ids["a"]}
    assert end(store, store.get(ids["a"]), ComputationStatus.FAILED)
    for name in ("b", "c"):
        row = store.get(ids[name])
        assert row.status.value == "cancelled"
        assert row.record["error"] == "cancelled: upstream step 'a' failed"
        assert row.record["error_kind"] == "cancelled" and row.record["finished_at"]
    assert claim_all(store) == {ids["d"], ids["e"]}


def test_a_failure_stops_a_diamond_below_it_once_and_releases_past_it(store):
    """Two paths down to ``d``: it is stopped once, by the failed step, and
    what may run past it is released by its end."""
    shape = {
        "a": [],
        "b": [("a", False)],
        "c": [("a", False)],
        "d": [("b", False), ("c", False)],
        "e": [("d", True)],
    }
    ids = linked(store, shape)
    assert claim_all(store) == {ids["a"]}
    assert end(store, store.get(ids["a"]), ComputationStatus.FAILED)
    for name in ("b", "c", "d"):
        row = store.get(ids[name])
        assert row.status.value == "cancelled"
        # once: a second stop of d, by b's or c's cancel, would say 'b' or 'c'
        assert row.record["error"] == "cancelled: upstream step 'a' failed"
        assert row.record["stopped_by"] == "a"
    assert claim_all(store) == {ids["e"]}


def test_a_cancelled_waiting_job_cancels_its_dependents(store):
    ids = linked(store, {"a": [], "b": [("a", False)], "c": [("b", False)]})
    store.request_cancel(ids["b"], now=time.time())
    row = store.get(ids["c"])
    assert row.status.value == "cancelled"
    assert row.record["error"] == "cancelled: upstream step 'b' was cancelled"


def test_a_pipelines_cancel_ends_its_queued_steps_and_flags_its_running_one(store):
    """``cancel``: what ``request_cancel`` does to each unfinished step, at once;
    a job outside the pipeline that waits on a step is settled as one cancel
    settles it (stopped, or released through ``allow_failure``)."""
    now = time.time()
    shape = {"a": [], "b": [("a", False)], "c": []}
    ids = {name: jid() for name in shape}
    records = [
        record(
            ids[n],
            kind=KIND,
            at=now + (0.5 if n == "c" else 0.0),  # a is claimed first
            step=n,
            after=[{"job_id": ids[u], "step": u, "allow_failure": a} for u, a in shape[n]],
        )
        for n in shape
    ]
    pid = "pl-" + jid()[:24]
    links = Links(
        pipeline={"pipeline_id": pid, "created_at": now, "doc": {"order": list(shape)}},
        steps=[(n, ids[n]) for n in shape],
        edges=[Edge(ids["a"], ids["b"], "a", False)],
        waiting=[ids["b"]],
        now=now,
    )
    pipes = pipelines_of(store)
    store.create_many(records, claimable=[True, False, True], also=pipes.linker(links))
    (running,) = store.claim([KIND], now=now + 1, runner_id="t", limit=1)
    assert running.record["job_id"] == ids["a"]
    # two jobs outside the pipeline: one stopped by b's cancel, one run anyway after c
    x, y = jid(), jid()
    outside = Links(
        pipeline=None,
        steps=(),
        edges=[Edge(ids["b"], x, "b", False), Edge(ids["c"], y, "c", True)],
        waiting=[x, y],
        now=now,
    )
    store.create_many(
        [record(x, kind="other", at=now), record(y, kind="other", at=now)],
        claimable=[False, False],
        also=pipes.linker(outside),
    )

    assert sorted(pipes.cancel(pid, now=now + 2)) == sorted(ids.values())  # each step flagged
    states = {n: store.get(ids[n]).status.value for n in shape}
    assert states == {"a": "cancelling", "b": "cancelled", "c": "cancelled"}
    assert store.get(ids["a"]).record["cancel_requested"]
    for n in ("b", "c"):
        rec = store.get(ids[n]).record
        assert rec["error"] == "cancelled before start" and rec["error_kind"] == "cancelled"
        assert rec["finished_at"] == now + 2 and rec["cancel_requested"]
    assert store.get(x).record["error"] == "cancelled: upstream step 'b' was cancelled"
    assert claim_all_of(store, "other") == {y}  # c's cancel released y (allow_failure)
    assert pipes.cancel(pid, now=now + 3) == []  # nothing left to cancel
    assert pipes.cancel("pl-" + jid()[:24], now=now) == []


def claim_all_of(store, kind: str) -> set[str]:
    return {r.record["job_id"] for r in store.claim([kind], now=time.time() + 5, runner_id="t")}
