"""Group commit: concurrent calls of one write coalesced into few statements."""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from typing import Any

_committing = threading.local()
"""``group``: the group whose committer this thread is."""
_GROUPS: weakref.WeakSet[GroupCommit] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for group in list(_GROUPS):
        group._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class GroupCommit:
    """Coalesces concurrent calls of one write into batches (group commit).

    ``submit_soon(item)`` queues the item and returns a ``Future`` of its
    result at once; ``submit(item)`` waits for that result. The group's own
    committer threads write: each takes every item queued so far (oldest
    first, one per ``key``, and none whose key is in a batch in flight), runs
    ``flush(items) -> results`` once, and resolves each item's future with its
    result or the batch's exception. One committer runs while anything waits;
    a second (up to ``lanes``) starts when ``crowd`` items wait while a batch
    is in flight, so the finishes that end meanwhile go out beside it rather
    than behind it. A committer with nothing to do for ``idle_s`` goes away.

    A caller that does not wait (a job's body handing over its finish) is free
    at once: only its future, and what is chained to it, waits for the commit.
    N callers at once pay one round trip and one commit instead of N.
    """

    def __init__(
        self,
        flush: Callable[[list[Any]], list[Any]],
        *,
        key: Callable[[Any], Any] | None = None,
        limit: int = 256,
        lanes: int = 1,
        crowd: int = 1,
        idle_s: float = 1.0,
        name: str = "nw-commit",
    ):
        if lanes < 1:
            raise ValueError(f"a group commit needs at least one lane, not {lanes}")
        self._flush, self._key, self._limit, self._lanes = flush, key, limit, lanes
        self._crowd, self._idle_s, self._name = crowd, idle_s, name
        self._lock = threading.Lock()
        self._more = threading.Condition(self._lock)
        """Notified when an item is queued or a batch is done."""
        self._queue: list[_Pending] = []
        self._flying: set[Any] = set()
        """The keys of the items in batches in flight."""
        self._batches = 0
        """Batches in flight (at most ``lanes``)."""
        self._committers = 0
        """Committer threads alive (at most ``lanes``)."""
        _GROUPS.add(self)

    def submit(self, item: Any) -> Any:
        """The item's result once written (its exception raised)."""
        return self.wait(self.submit_soon(item))

    def wait(self, future: Future) -> Any:
        """A future's result, waited for. Never on a committer of this group
        (what its futures' callbacks run on): it would wait on itself."""
        if getattr(_committing, "group", None) is self:
            raise RuntimeError("a group commit's committer cannot wait on the group")
        return future.result()

    def submit_soon(self, item: Any) -> Future:
        """Queue the item; its future resolves once it is written."""
        pending = _Pending(item, self._key(item) if self._key else object())
        with self._lock:
            self._queue.append(pending)
            start = self._committers == 0 or (
                self._committers == self._batches
                and self._committers < self._lanes
                and len(self._queue) >= self._crowd
            )
            if start:
                self._committers += 1
            else:
                self._more.notify()
        if start:
            self._start_committer()
        return pending.future

    def _start_committer(self) -> None:
        """Start the committer already counted in ``_committers``; without a
        thread to be had (exhausted, or the process exiting), the caller
        writes what nobody else will."""
        try:
            threading.Thread(target=self._commit, name=self._name, daemon=True).start()
        except RuntimeError:
            with self._lock:
                self._committers -= 1
                alone = self._committers == 0
            if alone:
                self._write_here()

    def _commit(self) -> None:
        """A committer: write batches while there are any, then go away (its
        count given back under the same lock that found nothing to do, so a
        caller never leaves an item to a committer on its way out)."""
        _committing.group = self
        gone = False
        try:
            while True:
                with self._lock:
                    batch = self._next_batch()
                    while batch is None:
                        if not self._more.wait(self._idle_s) and not self._queue:
                            self._committers -= 1
                            gone = True
                            return
                        batch = self._next_batch()
                self._run(batch)
        finally:
            if not gone:  # an exception escaped: hand on to a new committer
                with self._lock:
                    self._committers -= 1
                    again = bool(self._queue) and self._committers == 0
                    if again:
                        self._committers += 1
                if again:
                    self._start_committer()

    def _write_here(self) -> None:
        """Write what can go, on the caller's thread (no committer could start)."""
        while True:
            with self._lock:
                batch = self._next_batch()
            if batch is None:
                return
            self._run(batch)

    def _after_fork(self) -> None:
        """In a forked child: no committer, no batch in flight, nothing queued
        (the parent's callers wait on the parent's items), fresh locks."""
        self._lock = threading.Lock()
        self._more = threading.Condition(self._lock)
        self._queue, self._flying, self._batches, self._committers = [], set(), 0, 0

    def _run(self, batch: list[_Pending]) -> None:
        try:
            results = list(self._flush([p.item for p in batch]))
            failure = None
            if len(results) != len(batch):
                raise RuntimeError(f"a flush of {len(batch)} items returned {len(results)} results")
        except BaseException as exc:
            results, failure = [None] * len(batch), exc
        with self._lock:
            for pending in batch:
                self._flying.discard(pending.key)
            self._batches -= 1
            self._more.notify_all()  # a lane and its keys are free again
        for pending, result in zip(batch, results, strict=True):
            pending.resolve(result, failure)

    def _next_batch(self) -> list[_Pending] | None:
        """The next batch if a lane is free (oldest first, one item per key, no
        key in flight), now in flight; None if no lane or no item can go. The
        caller holds the lock."""
        if self._batches >= self._lanes:
            return None
        if self._batches and len(self._queue) < self._crowd:
            return None
        batch: list[_Pending] = []
        seen: set[Any] = set()
        rest: list[_Pending] = []
        for pending in self._queue:
            if pending.key in seen or pending.key in self._flying or len(batch) >= self._limit:
                rest.append(pending)
            else:
                seen.add(pending.key)
                batch.append(pending)
        if not batch:
            return None
        self._queue = rest
        self._flying |= seen
        self._batches += 1
        return batch


class _Pending:
    __slots__ = ("future", "item", "key")

    def __init__(self, item: Any, key: Any):
        self.item, self.key, self.future = item, key, Future[Any]()
        self.future.set_running_or_notify_cancel()  # queued is running: no cancel

    def resolve(self, result: Any, failure: BaseException | None) -> None:
        """The item's future: the batch's exception, the item's own, or its result
        (a future someone cancelled meanwhile is left as it is)."""
        error = failure if failure is not None else result
        with contextlib.suppress(InvalidStateError):
            if isinstance(error, BaseException):
                self.future.set_exception(error)
            else:
                self.future.set_result(result)
