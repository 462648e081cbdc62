"""GroupCommit: concurrent writes coalesced into batches, in one or two lanes."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from nw.jobs.stores.group_commit import GroupCommit
from tests.helpers import wait_until


class Flushes:
    """A flush that records its batches and, for the items in ``hold``, blocks
    until the test releases them (a statement in flight)."""

    def __init__(self, hold=()):
        self.batches: list[list[str]] = []
        self.hold = set(hold)
        self.release = threading.Event()
        self.lock = threading.Lock()
        self.fail: set[str] = set()

    def __call__(self, items):
        with self.lock:
            self.batches.append(list(items))
        if self.hold & set(items):
            assert self.release.wait(10), "the test never released the batch"
        if self.fail & set(items):
            raise RuntimeError(f"flush failed for {sorted(self.fail & set(items))}")
        return [f"done:{item}" for item in items]

    def flushed(self, item) -> bool:
        with self.lock:
            return any(item in batch for batch in self.batches)


def submit_all(gc, items):
    """Each item submitted from a thread of its own; returns the threads and results."""
    results: dict[str, object] = {}

    def run(item):
        try:
            results[item] = gc.submit(item)
        except Exception as exc:
            results[item] = exc

    threads = [threading.Thread(target=run, args=(item,), daemon=True) for item in items]
    for t in threads:
        t.start()
    return threads, results


def queued(gc, n):
    wait_until(lambda: len(gc._queue) == n, what=f"{n} items waiting")


def join(threads):
    for t in threads:
        t.join(10)
        assert not t.is_alive()


def test_a_lone_caller_is_its_own_batch():
    flush = Flushes()
    gc = GroupCommit(flush)
    assert gc.submit("a") == "done:a"
    assert flush.batches == [["a"]]


def test_what_waits_behind_a_batch_in_flight_goes_out_together_in_one_lane():
    flush = Flushes(hold={"a"})
    gc = GroupCommit(flush)
    first, results = submit_all(gc, ["a"])
    wait_until(lambda: flush.flushed("a"), what="the first batch in flight")
    rest, more = submit_all(gc, ["b", "c", "d"])
    queued(gc, 3)
    assert flush.batches == [["a"]]  # one lane: nothing else goes while it is in flight
    flush.release.set()
    join(first + rest)
    assert len(flush.batches) == 2 and sorted(flush.batches[1]) == ["b", "c", "d"]
    assert {**results, **more} == {k: f"done:{k}" for k in "abcd"}


def test_a_second_lane_opens_for_a_crowd_but_not_for_a_lone_item():
    flush = Flushes(hold={"a", "b"})
    gc = GroupCommit(flush, lanes=2, crowd=2)
    first, _ = submit_all(gc, ["a"])
    wait_until(lambda: flush.flushed("a"), what="the first batch in flight")
    lone, _ = submit_all(gc, ["b"])
    queued(gc, 1)
    assert not flush.flushed("b")  # one waiting item waits behind the batch in flight
    crowd, results = submit_all(gc, ["c"])
    # two waiting: they go out in the second lane while the first is still in flight
    wait_until(lambda: flush.flushed("c"), what="the second lane")
    assert sorted(flush.batches[1]) == ["b", "c"]
    flush.release.set()
    join(first + lone + crowd)
    assert results == {"c": "done:c"}


def test_two_lanes_never_carry_one_key_at_once():
    flush = Flushes(hold={"a1"})
    gc = GroupCommit(flush, key=lambda item: item[0], lanes=2)
    first, _ = submit_all(gc, ["a1"])
    wait_until(lambda: flush.flushed("a1"), what="the first batch in flight")
    # key "a" is in flight: its second item may not go in the second lane, "b" may
    rest, results = submit_all(gc, ["a2", "b1"])
    wait_until(lambda: flush.flushed("b1"), what="the second lane")
    assert not flush.flushed("a2")
    flush.release.set()
    join(first + rest)
    assert results == {"a2": "done:a2", "b1": "done:b1"}
    assert flush.batches[-1] == ["a2"]  # after its key's batch was written


def test_at_most_lanes_batches_are_in_flight():
    flush = Flushes(hold={"a", "b", "c"})
    gc = GroupCommit(flush, lanes=2)
    threads, _ = submit_all(gc, ["a"])
    wait_until(lambda: flush.flushed("a"), what="the first lane")
    more, _ = submit_all(gc, ["b"])
    wait_until(lambda: flush.flushed("b"), what="the second lane")
    third, _ = submit_all(gc, ["c", "d"])
    queued(gc, 2)
    assert len(flush.batches) == 2
    flush.release.set()
    join(threads + more + third)
    assert sorted(x for batch in flush.batches for x in batch) == ["a", "b", "c", "d"]


def test_a_failed_batch_fails_its_own_items_and_the_lane_goes_on():
    flush = Flushes(hold={"a"})
    flush.fail = {"b"}
    gc = GroupCommit(flush)
    first, results = submit_all(gc, ["a"])
    wait_until(lambda: flush.flushed("a"), what="the first batch in flight")
    rest, more = submit_all(gc, ["b", "c"])
    queued(gc, 2)
    flush.release.set()
    join(first + rest)
    assert results == {"a": "done:a"}
    assert all(isinstance(more[k], RuntimeError) for k in "bc")  # one batch: both failed
    assert gc.submit("d") == "done:d"  # and the lane is free again


def test_a_result_that_is_an_exception_fails_that_item_alone():
    gc = GroupCommit(lambda items: [ValueError(i) if i == "x" else i for i in items])
    with pytest.raises(ValueError):
        gc.submit("x")
    assert gc.submit("y") == "y"


def test_a_batch_never_exceeds_its_limit_and_every_item_is_written():
    flush = Flushes(hold={"a"})
    gc = GroupCommit(flush, limit=2)
    first, _ = submit_all(gc, ["a"])
    wait_until(lambda: flush.flushed("a"), what="the first batch in flight")
    rest, results = submit_all(gc, list("bcdef"))
    queued(gc, 5)
    flush.release.set()
    join(first + rest)
    assert all(len(batch) <= 2 for batch in flush.batches)
    assert results == {k: f"done:{k}" for k in "bcdef"}


def test_a_flush_that_answers_the_wrong_number_of_items_fails_the_batch():
    gc = GroupCommit(lambda items: [])
    with pytest.raises(RuntimeError, match="returned 0 results"):
        gc.submit("a")


def test_lanes_are_at_least_one():
    with pytest.raises(ValueError, match="at least one lane"):
        GroupCommit(lambda items: items, lanes=0)


def test_a_caller_that_does_not_wait_is_free_before_its_item_is_written():
    # Given a batch in flight that the test holds
    flush = Flushes(hold={"a"})
    gc = GroupCommit(flush)
    first = gc.submit_soon("a")
    wait_until(lambda: flush.flushed("a"), what="the batch in flight")
    # When another item is handed over without waiting
    later = gc.submit_soon("b")
    # Then both callers are free while nothing is written yet
    assert not first.done() and not later.done()
    flush.release.set()
    assert first.result(10) == "done:a" and later.result(10) == "done:b"
    assert flush.batches == [["a"], ["b"]]


def test_a_caller_that_stops_waiting_leaves_its_item_to_be_written():
    flush = Flushes(hold={"a"})
    gc = GroupCommit(flush)
    gc.submit_soon("a")
    wait_until(lambda: flush.flushed("a"), what="the batch in flight")
    # When a caller that waits for "b" is interrupted (its future abandoned)
    abandoned = gc.submit_soon("b")
    with pytest.raises(TimeoutError):
        abandoned.result(0.01)
    flush.release.set()
    # Then "b" is written all the same, and the group goes on
    assert abandoned.result(10) == "done:b" and gc.submit("c") == "done:c"


def test_committers_go_away_when_idle_and_come_back_for_more():
    flush = Flushes()
    gc = GroupCommit(flush, lanes=2, idle_s=0.05, name="nw-commit-test")

    def committers() -> int:
        return sum(t.name == "nw-commit-test" for t in threading.enumerate())

    assert gc.submit("a") == "done:a"
    wait_until(lambda: committers() == 0, what="the idle committer gone")
    assert gc.submit("b") == "done:b" and flush.batches == [["a"], ["b"]]


def test_a_committer_that_would_wait_on_its_own_group_fails_instead_of_stalling():
    def flush(items):
        if items == ["outer"]:
            gc.submit("inner")  # e.g. a callback writing through the group and waiting
        return items

    gc = GroupCommit(flush)
    with pytest.raises(RuntimeError, match="cannot wait on the group"):
        gc.submit("outer")
    assert gc.submit("after") == "after"


def test_a_handed_over_item_cannot_be_cancelled_and_is_written():
    flush = Flushes(hold={"a"})
    gc = GroupCommit(flush)
    future = gc.submit_soon("a")
    wait_until(lambda: flush.flushed("a"), what="the batch in flight")
    assert future.cancel() is False  # queued is as good as written
    flush.release.set()
    assert future.result(10) == "done:a" and gc.submit("b") == "done:b"


def test_without_a_thread_for_a_committer_the_caller_writes_its_item(monkeypatch):
    flush = Flushes()
    gc = GroupCommit(flush, name="nw-commit-nothread")
    real_start = threading.Thread.start

    def start(thread):
        if thread.name == "nw-commit-nothread":
            raise RuntimeError("can't start new thread")
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    future = gc.submit_soon("a")
    assert future.done() and future.result() == "done:a"
    monkeypatch.undo()
    assert gc.submit("b") == "done:b"  # and a committer comes when it can


def test_a_forked_child_writes_through_its_own_committers():
    flush = Flushes()
    gc = GroupCommit(flush, idle_s=30.0)  # the parent's committer is alive at the fork
    assert gc.submit("parent") == "done:parent"
    pid = os.fork()
    if pid == 0:  # the child: its write must not wait on the parent's committer
        signal.alarm(10)
        os._exit(0 if gc.submit("child") == "done:child" else 1)
    status = _wait_exit(pid)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def _wait_exit(pid: int) -> int:
    """The child's wait status, polled with a deadline."""
    found: list[int] = []

    def exited() -> bool:
        got_pid, status = os.waitpid(pid, os.WNOHANG)
        if got_pid == pid:
            found.append(status)
        return bool(found)

    wait_until(exited, what="the forked child to exit", timeout=20)
    return found[0]
