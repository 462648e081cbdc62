"""In-process pipeline steps waiting on their upstreams, off the pool.

A step whose body runs in the process that enqueued it (``dispatch=``) is
started by that process, never claimed by a worker: the store releases it
when its upstreams have ended (``released_at`` in its record, in the
transaction that ends the last of them) and gives it no due time
(``release_due``: migration 0009, ``sqlite_pipelines.sql``). Waiting on a
pool thread would hold the slot an upstream of the same process needs, so
the waiting steps are read here instead: one thread per runtime reads them
all in one ``get_many`` when the store's change signal fires (the OS's report
of a write to the embedded store's folder; on PostgreSQL the ``NOTIFY`` of
the statement that ends a job), and every ``RECHECK_S`` besides (a lost
signal costs latency, never a step); the thread ends when no step is left.
A released step goes to the pool, where
its start still obeys its delay and its key's limit; a step the store ended
instead (an upstream failed, a cancel) lets go of its hold.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Literal

from nw.jobs.core.records import JobRow, waits_on_upstreams
from nw.jobs.stores.roles import JobReads

log = logging.getLogger("nw.jobs")

#: The longest a waiting step goes unread, signal or not.
RECHECK_S = 2.0

Turn = Literal["start", "ended", "wait"]


def turn_of(row: JobRow | None) -> Turn:
    """What a process does next with an in-process step it holds: start it
    (released), let it go (ended, gone, or started elsewhere), or wait."""
    if row is None or row.status.value != "queued":
        return "ended"
    return "wait" if waits_on_upstreams(row.record) else "start"


class StepWaits:
    """The in-process steps one runtime holds until their upstreams release them.
    ``start(row)`` is called for a released step, ``ended(job_id, hold)`` for one
    the store ended first (``hold``: what ``add`` was given with it); each step
    once, on this object's thread. A step added again meanwhile (a retry of the
    same id) is not acted on for the read of the one before it."""

    def __init__(
        self,
        store: JobReads,
        start: Callable[[JobRow], None],
        ended: Callable[[str, Any], None],
    ):
        self._store = store
        self._start = start
        self._ended = ended
        self._waiting: dict[str, Any] = {}  # job id -> its hold
        self._lock = threading.Lock()
        self._signal = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def add(self, job_id: str, hold: Any) -> None:
        with self._lock:
            self._waiting[job_id] = hold
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="nw-steps", daemon=True)
                self._thread.start()
        self._signal.set()  # it may have been released before it was added

    def nudge(self) -> None:
        """Read the waiting steps now (a cancel asked here, say)."""
        self._signal.set()

    def _run(self) -> None:
        try:
            unsubscribe = self._store.subscribe(self._signal.set)
        except Exception:  # no signal: the rechecks alone find the releases
            log.exception("in-process steps: no change signal from the store")
            unsubscribe = None
        try:
            while not self._stop.is_set():
                self._signal.clear()  # before the read: a change after it is not lost
                try:
                    self.check()
                except Exception:  # a round that failed is read again, never the end
                    log.exception("in-process steps: a round of reads failed")
                with self._lock:  # none left: the thread goes (``add`` starts another)
                    if not self._waiting:
                        self._thread = None
                        return
                self._signal.wait(RECHECK_S)
        finally:
            if unsubscribe is not None:
                unsubscribe()

    def check(self) -> None:
        """Read every waiting step once and act on what it says."""
        with self._lock:
            held = dict(self._waiting)
        if not held:
            return
        ids = list(held)
        try:
            rows = self._store.get_many(ids)
        except Exception:
            log.exception("in-process steps: could not read %d waiting step(s)", len(ids))
            return
        for job_id in ids:
            row = rows.get(job_id)
            turn = turn_of(row)
            if turn == "wait":
                continue
            with self._lock:
                if self._waiting.get(job_id) is not held[job_id]:
                    continue  # added again since the read: the next round reads it
                del self._waiting[job_id]
            try:
                if turn == "start":
                    assert row is not None
                    self._start(row)
                else:
                    self._ended(job_id, held[job_id])
            except Exception:
                log.exception("in-process step %s: could not be handed on", job_id)

    def close(self) -> None:
        self._stop.set()
        self._signal.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=RECHECK_S + 1)
