"""The replayed queue a read of queued jobs needs, kept a moment per store.

Predicting a queued job's start (``nw.jobs.core.waits``) reads up to
``waits.QUEUE_HORIZON`` jobs ahead, the running jobs, the limits and the
workers, then replays them: milliseconds, on every ``get_job`` of a queued job
and every page that holds one. A tray or an app polling "you are 37th in
line" asks that many times a second, while the answer moves only with the
queue. So one replay serves every read of the same store for ``KEEP_S``; a
read that asks about a job the kept replay does not know (queued since, or
beyond a queue shorter than the horizon) replays again at once.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: How long one replay answers reads (a second: the resolution of an ETA).
KEEP_S = 1.0


@dataclass(frozen=True)
class Replay:
    """One replay of a store's queue: when, what it knew, what it predicted."""

    at: float
    limits: dict[str, Any]
    planned: dict[str, Any]
    truncated: bool  # the queue ran past the horizon: a job it lacks is further back
    served: frozenset[str] = frozenset()  # the kinds some live worker claims


_kept: weakref.WeakKeyDictionary[Any, Replay] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def replay(store: Any, now: float, wanted: Iterable[str], compute: Callable[[], Replay]) -> Replay:
    """The store's kept replay when it is fresh and knows every ``wanted`` job
    (or the queue was longer than the horizon), else ``compute()``, kept."""
    with _lock:
        kept = _kept.get(store)
    if (
        kept is not None
        and 0.0 <= now - kept.at < KEEP_S
        and (kept.truncated or all(job_id in kept.planned for job_id in wanted))
    ):
        return kept
    fresh = compute()
    with _lock:
        _kept[store] = fresh
    return fresh
