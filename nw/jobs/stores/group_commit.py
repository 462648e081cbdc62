"""Group commit: concurrent calls of one write coalesced into few statements."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class GroupCommit:
    """Coalesces concurrent calls of one write into batches (group commit).

    ``submit(item)`` blocks until the item is written and returns its result.
    A caller that finds a lane free (fewer than ``lanes`` batches in flight)
    leads: it takes every item queued so far (oldest first, one per ``key``,
    and none whose key is in a batch in flight), runs ``flush(items) ->
    results`` once, outside the lock, and hands each waiter its result or the
    batch's exception. It then hands the lane on: the oldest waiter of the next
    batch leads that one. A lone caller pays nothing extra (its batch is
    itself); N threads finishing at once pay one round trip and one commit
    instead of N, and with two lanes the finishes that end while one batch is
    in flight go out in a second, rather than waiting behind it.

    Every waiter sleeps on its own event and is woken once, when its item is
    written or its batch is handed to it, and only after the lock is released
    (its first step is to take it).
    """

    def __init__(
        self,
        flush: Callable[[list[Any]], list[Any]],
        *,
        key: Callable[[Any], Any] | None = None,
        limit: int = 256,
        lanes: int = 1,
        crowd: int = 1,
    ):
        if lanes < 1:
            raise ValueError(f"a group commit needs at least one lane, not {lanes}")
        self._flush, self._key, self._limit, self._lanes = flush, key, limit, lanes
        self._crowd = crowd
        self._lock = threading.Lock()
        self._queue: list[_Pending] = []
        self._flying: set[Any] = set()
        """The keys of the items in batches in flight."""
        self._batches = 0
        """Batches in flight (at most ``lanes``)."""

    def submit(self, item: Any) -> Any:
        mine = _Pending(item, self._key(item) if self._key else object())
        with self._lock:
            self._queue.append(mine)
            batch = self._next_batch()
        while not mine.done:
            if batch is None:  # wait until written, or handed a batch to lead
                try:
                    mine.wake.wait()
                except BaseException:  # e.g. Ctrl-C: nobody else may be left waiting on us
                    self._abandon(mine)
                    raise
                with self._lock:
                    mine.wake.clear()
                    batch, mine.batch = mine.batch, None
            else:  # lead it (a batch over ``limit`` may not hold mine: then wait on)
                self._run(batch)
                batch = None
        return mine.value()

    def _abandon(self, mine: _Pending) -> None:
        """A waiter interrupted: its item is dropped if no batch holds it yet;
        a batch handed to it goes on to another of its waiters, or, held by no
        one else, gives its lane back."""
        with self._lock:
            batch, mine.batch = mine.batch, None
            woken: list[_Pending] = []
            if batch is None:
                if mine in self._queue:  # never taken: never written
                    self._queue.remove(mine)
            else:
                self._flying.discard(mine.key)
                others = [p for p in batch if p is not mine]
                if others:
                    others[0].batch = others
                    woken.append(others[0])
                else:
                    self._batches -= 1
                    woken = self._hand_on()
        for pending in woken:
            pending.wake.set()

    def _run(self, batch: list[_Pending]) -> None:
        try:
            results = list(self._flush([p.item for p in batch]))
            failure = None
            if len(results) != len(batch):
                raise RuntimeError(f"a flush of {len(batch)} items returned {len(results)} results")
        except BaseException as exc:
            results, failure = [None] * len(batch), exc
        with self._lock:
            for pending, result in zip(batch, results, strict=True):
                pending.finish(result, failure)
                self._flying.discard(pending.key)
            self._batches -= 1
            woken = batch + self._hand_on()
        # Woken once the lock is free: a waiter's first step is to take it.
        for pending in woken:
            pending.wake.set()

    def _hand_on(self) -> list[_Pending]:
        """Hand the batches that can go now to their oldest waiters (to be
        woken); the caller holds the lock."""
        leads = []
        while (following := self._next_batch()) is not None:
            following[0].batch = following
            leads.append(following[0])
        return leads

    def _next_batch(self) -> list[_Pending] | None:
        """The next batch if a lane is free (oldest first, one item per key, no
        key in flight), now in flight; None if no lane or no item can go. The
        caller holds the lock."""
        if self._batches >= self._lanes:
            return None
        if self._batches and len(self._queue) < self._crowd:
            return None
        batch, seen, rest = [], set(), []
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
    __slots__ = ("batch", "done", "error", "item", "key", "result", "wake")

    def __init__(self, item: Any, key: Any):
        self.item, self.key, self.done, self.result, self.error = item, key, False, None, None
        self.batch: list[_Pending] | None = None
        self.wake = threading.Event()

    def finish(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error, self.done = result, error, True

    def value(self) -> Any:
        """The result; an exception (the batch's, or this item's own) is raised."""
        if self.error is not None:
            raise self.error
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result
