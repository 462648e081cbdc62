"""``enqueue_many``: a batch means what its items mean one by one, written all or nothing."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from nw import jobs
from nw.jobs import BudgetExceeded
from nw.jobs.stores import shared_store
from tests.fixtures import bodies
from tests.helpers import wait_until


@pytest.fixture(autouse=True)
def _kinds():
    bodies.register_all()


def ids_in_store(project, cfg) -> set[str]:
    return {j.job_id for j in jobs.list_jobs(project, limit=1000, config=cfg)}


def test_a_batch_is_one_job_per_item_in_order_with_enqueues_fields(project, cfg):
    items = [
        ("t.noop", {"i": 0}),
        {"kind": "t.noop", "params": {"i": 1}, "label": "first", "actor": "ana"},
        {"kind": "t.noop", "params": {"i": 2}, "idempotency_key": "order-7"},
        ["t.paid", {"i": 3, "model": "m", "operation": "render"}],
    ]
    got = jobs.enqueue_many(project, items, config=cfg)
    assert [j.kind for j in got] == ["t.noop", "t.noop", "t.noop", "t.paid"]
    assert [j.params.get("i") for j in got] == [0, 1, 2, 3]
    assert {j.status for j in got} == {jobs.QUEUED}
    assert got[1].label == "first" and got[1].actor == {"id": "ana"}
    assert got[2].idempotency_key == "order-7"
    assert got[3].max_attempts == 3  # the registered kind's retry policy, as enqueue gives it
    assert got[3].confidence is not None  # an ETA prediction, as enqueue makes one
    # the same item through enqueue is the same job (one id per item, as enqueue computes it)
    assert jobs.enqueue(project, "t.noop", {"i": 1}, config=cfg).job_id == got[1].job_id
    assert ids_in_store(project, cfg) == {j.job_id for j in got}
    stored = jobs.get_job(project, got[1].job_id, config=cfg)
    assert stored.label == "first" and stored.run_id == got[1].run_id


def test_dispatch_items_run_in_this_process(project, cfg):
    ran = []

    def body(project, params):
        ran.append(params["i"])
        return {"i": params["i"]}

    got = jobs.enqueue_many(
        project, [("r", {"i": 1}), ("r", {"i": 2})], dispatch={"r": body}, config=cfg
    )
    for job in got:
        done = wait_until(
            lambda job=job: (j := jobs.get_job(project, job.job_id, config=cfg)).is_terminal and j
        )
        assert done.status == jobs.SUCCEEDED and done.result == {"i": job.params["i"]}
    assert sorted(ran) == [1, 2]


def test_dedup_within_the_batch_and_against_live_jobs(project, cfg):
    live = jobs.enqueue(project, "t.noop", {"i": "live"}, config=cfg)
    got = jobs.enqueue_many(
        project,
        [
            ("t.noop", {"i": "live"}),
            ("t.noop", {"i": "a", "x": 1.0}),
            ("t.noop", {"x": 1, "i": "a"}),  # the same params in another spelling
            {"kind": "t.noop", "params": {"i": "b"}, "idempotency_key": "k"},
            {"kind": "t.noop", "params": {"i": "c"}, "idempotency_key": "k"},  # same key
        ],
        config=cfg,
    )
    assert got[0].job_id == live.job_id and got[0].run_id == live.run_id
    assert got[1].job_id == got[2].job_id and got[1].run_id == got[2].run_id
    assert got[3].job_id == got[4].job_id and got[4].params == {"i": "b"}
    assert len({j.job_id for j in got}) == 3
    assert ids_in_store(project, cfg) == {live.job_id, got[1].job_id, got[3].job_id}


def test_each_job_of_a_batch_reads_back_as_it_was_returned(project, cfg):
    # Most of a batch's documents are alike (PostgreSQL sends those fields once):
    # a field some items share and others do not reads back item by item.
    items = [
        {"kind": "t.noop", "params": {"i": i}, "label": "same" if i % 3 else f"own {i}"}
        for i in range(7)
    ]
    items += [
        {"kind": "t.paid", "params": {"i": 7, "model": "m", "operation": "render"}},
        {"kind": "t.noop", "params": {"i": 8}, "actor": "ana", "priority": 2},
    ]
    got = jobs.enqueue_many(project, items, config=cfg)
    assert [j.label for j in got][:7] == ["own 0", "same", "same", "own 3", "same", "same", "own 6"]

    def seen(job):
        return (
            job.label,
            job.params,
            job.actor,
            job.priority,
            job.max_attempts,
            job.run_id,
            job.idempotency_key,
            job.predicted_total_s,
            job.confidence,
            job.cost,
        )

    for job in got:
        assert seen(jobs.get_job(project, job.job_id, config=cfg)) == seen(job)
    assert got[7].max_attempts == 3 and got[0].max_attempts == 1


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (("t.nope", {}), KeyError, "item 2: unknown kind 't.nope'"),
        (("t.noop", {"f": object()}), TypeError, "item 2: "),
        (("t.noop", {"units": -1}), ValueError, "item 2: "),
        (("t.noop",), TypeError, "item 2: an item is a (kind, params) pair"),
        ({"kind": "t.noop", "params": {}, "colour": "red"}, TypeError, "item 2: unknown field"),
        ({"params": {}}, KeyError, "item 2: an item needs a 'kind'"),
        ({"kind": "t.noop", "params": {}, "actor": 7}, TypeError, "item 2: actor must be"),
        ({"kind": "t.noop", "params": {}, "idempotency_key": ""}, ValueError, "item 2: "),
    ],
)
def test_bad_input_anywhere_refuses_the_whole_batch_naming_the_item(
    project, cfg, bad, error, message
):
    items = [("t.noop", {"i": 0}), ("t.noop", {"i": 1}), bad, ("t.noop", {"i": 3})]
    with pytest.raises(error) as info:
        jobs.enqueue_many(project, items, config=cfg)
    text = info.value.args[0]
    assert text.startswith(message), text
    assert jobs.list_jobs(project, config=cfg) == []
    assert shared_store(project, cfg, create=False) is None or ids_in_store(project, cfg) == set()


def test_items_must_be_a_list_of_items(project, cfg):
    for wrong in ({"kind": "t.noop", "params": {}}, "t.noop", 7):
        with pytest.raises(TypeError, match="items must be an iterable"):
            jobs.enqueue_many(project, wrong, config=cfg)
    assert jobs.enqueue_many(project, [], config=cfg) == []


def test_the_budget_is_checked_over_the_batch_as_a_whole(project, cfg):
    capped = replace(cfg, budget_usd=1.0)

    def item(i, usd):
        return ("t.noop", {"i": i, "estimated_usd": usd})

    with pytest.raises(BudgetExceeded) as info:
        jobs.enqueue_many(project, [item(0, 0.4), item(1, 0.4), item(2, 0.4)], config=capped)
    assert str(info.value).startswith("item 2: spend cap $1.00")
    assert jobs.list_jobs(project, config=cfg) == []  # all or nothing
    first = jobs.enqueue_many(project, [item(0, 0.4), item(1, 0.4)], config=capped)
    # a resubmit of a live job is a dedup, not new spend: only the new 0.2 counts
    again = jobs.enqueue_many(project, [item(1, 0.4), item(3, 0.2)], config=capped)
    assert again[0].job_id == first[1].job_id
    with pytest.raises(BudgetExceeded, match=r"^item 1: "):
        jobs.enqueue_many(project, [item(1, 0.4), item(4, 0.01)], config=capped)
    with pytest.raises(BudgetExceeded, match=r"^item 0: .*needs explicit approval"):
        jobs.enqueue_many(project, [("t.noop", {"i": 5})], config=replace(cfg, budget_usd=9.0))
    assert len(ids_in_store(project, cfg)) == 3
    assert jobs.spend(project, config=cfg)["live_estimated_usd"] == pytest.approx(1.0)


def test_concurrent_batches_under_a_budget_admit_only_what_fits(project, cfg):
    capped = replace(cfg, budget_usd=1.0)
    jobs.enqueue(project, "t.noop", {"warm": 1, "estimated_usd": 0.0}, config=capped)
    barrier = threading.Barrier(4)
    outcomes: list[str] = []

    def go(k):
        batch = [("t.noop", {"t": k, "n": n, "estimated_usd": 0.3}) for n in range(2)]
        barrier.wait()
        try:
            jobs.enqueue_many(project, batch, config=capped)
            outcomes.append("ok")
        except BudgetExceeded:
            outcomes.append("refused")

    threads = [threading.Thread(target=go, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok", "refused", "refused", "refused"]
    assert len(ids_in_store(project, cfg)) == 3
    assert jobs.spend(project, config=cfg)["live_estimated_usd"] == pytest.approx(0.6)


def test_concurrent_batches_that_overlap_create_each_job_once(project, cfg):
    jobs.enqueue(project, "t.noop", {"warm": 1}, config=cfg)  # the store exists before the race
    barrier = threading.Barrier(4)
    results: list[list[jobs.Job]] = []
    lock = threading.Lock()

    def go(k):
        mine = [("t.noop", {"i": i}) for i in range(k * 10, k * 10 + 20)]  # overlaps by half
        if k % 2:
            mine.reverse()
        barrier.wait()
        got = jobs.enqueue_many(project, mine, config=cfg)
        with lock:
            results.append(got)

    threads = [threading.Thread(target=go, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    by_id: dict[str, set[str]] = {}
    for got in results:
        for job in got:
            by_id.setdefault(job.job_id, set()).add(job.run_id)
    assert len(by_id) == 50 and all(len(runs) == 1 for runs in by_id.values())
    assert len(ids_in_store(project, cfg)) == 51
    stored = {j.job_id: j.run_id for j in jobs.list_jobs(project, limit=100, config=cfg)}
    assert all(stored[job_id] in runs for job_id, runs in by_id.items())
