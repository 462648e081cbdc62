"""``StepWaits`` acts on a waiting step once, for the hold it read: a step
added again while a read was in flight (a retry of the same id) is not let go
by that read."""

from __future__ import annotations

import threading

from nw.jobs.execution.step_waits import StepWaits


class _Store:
    """A store whose change signal never comes (its thread stays in
    ``subscribe`` until the test ends, so only the test's ``check`` reads) and
    whose steps are all gone (read as ended)."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.during_read = lambda: None

    def subscribe(self, _callback):
        self.done.wait(30)
        return lambda: None

    def get_many(self, ids):
        self.during_read()
        return {}


def test_a_step_added_again_during_a_read_is_not_let_go_by_that_read() -> None:
    store, ended = _Store(), []
    waits = StepWaits(store, start=lambda row: None, ended=lambda j, hold: ended.append((j, hold)))
    try:
        waits.add("job-1", "first run")
        store.during_read = lambda: waits.add("job-1", "second run")  # a retry holds it again
        waits.check()
        assert ended == []  # the read was of the first run: the second is not dropped
        store.during_read = lambda: None
        waits.check()
        assert ended == [("job-1", "second run")]  # read again, it is let go with its own hold
    finally:
        store.done.set()
        waits.close()
