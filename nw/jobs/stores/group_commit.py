"""Group commit: concurrent calls of one write coalesced into one statement."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class GroupCommit:
    """Coalesces concurrent calls of one write into one statement (group commit).

    ``submit(item)`` blocks until the item is written and returns its result.
    The first caller to find no batch in flight becomes the leader: it takes
    every item queued so far (one per ``key``; a second item for the same key
    waits for the next batch), runs ``flush(items) -> results`` once, outside
    the lock, and hands each waiter its result or the batch's exception. A
    lone caller pays nothing extra (its batch is itself); N threads finishing
    at once pay one round trip and one commit instead of N.
    """

    def __init__(self, flush: Callable[[list[Any]], list[Any]], *, key=None, limit: int = 256):
        self._flush, self._key, self._limit = flush, key, limit
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[_Pending] = []
        self._busy = False

    def submit(self, item: Any) -> Any:
        mine = _Pending(item)
        with self._cond:
            self._queue.append(mine)
        while True:
            with self._cond:
                while self._busy and not mine.done:
                    self._cond.wait()
                if mine.done:
                    return mine.value()
                batch = self._take()  # mine is queued, so the batch is not empty
                self._busy = True
            try:
                results = list(self._flush([p.item for p in batch]))
                failure = None
            except BaseException as exc:
                results, failure = [None] * len(batch), exc
            with self._cond:
                for pending, result in zip(batch, results, strict=True):
                    pending.finish(result, failure)
                self._busy = False
                self._cond.notify_all()

    def _take(self) -> list[_Pending]:
        """The next batch, oldest first, one item per key; the caller holds the lock."""
        batch, seen, rest = [], set(), []
        for pending in self._queue:
            key = self._key(pending.item) if self._key else id(pending)
            if key in seen or len(batch) >= self._limit:
                rest.append(pending)
            else:
                seen.add(key)
                batch.append(pending)
        self._queue = rest
        return batch


class _Pending:
    __slots__ = ("done", "error", "item", "result")

    def __init__(self, item: Any):
        self.item, self.done, self.result, self.error = item, False, None, None

    def finish(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error, self.done = result, error, True

    def value(self) -> Any:
        """The result; an exception (the batch's, or this item's own) is raised."""
        if self.error is not None:
            raise self.error
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result
