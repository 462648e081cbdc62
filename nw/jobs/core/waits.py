"""When a queued job will start, and what it is waiting for (pure).

A queued job's ETA used to be its own run time only, as if a worker were free
and nothing stood ahead of it. ``plan_starts`` replays the queue instead: the
jobs ahead of it in claim order (``JobStore.queue_ahead``), the running jobs
and when they should end (their own ETAs), the live workers' slots, each key's
``max_running`` and ``per_second``, and each job's due time. It is list
scheduling, the way the workers claim: each job in claim order takes the
earliest moment at which it is due, a slot is free, its key has a free slot
and its key's last second has room, in the slot freed last before then (a job
waiting on its key does not hold an earlier slot the jobs behind it can use,
as a full key holds up no other key in the claim).

Honesty: the start of a job is unknown ("estimating…") when it cannot be
derived from what has been learned: no live worker to run it, or a job ahead
of it (or running) whose run time is only a prior. One exception keeps the
common case informative: with free slots and nothing ahead, the start is now.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nw.jobs.core.limits import Limit, delay_text, is_full, waiting_text

#: How far down the queue a prediction replays (a job further back: unknown).
QUEUE_HORIZON = 500


@dataclass(frozen=True)
class Wait:
    """A queued job's predicted start (None: unknown) and what holds it now."""

    start_in_s: float | None
    reason: str | None


@dataclass(frozen=True)
class Running:
    """A running job as the replay needs it: its key and when it should end."""

    limit_key: str | None
    remaining_s: float | None  # None: unknown (a prior)


def plan_starts(
    queue: Sequence[Mapping[str, Any]],
    running: Sequence[Running],
    *,
    slots: int,
    limits: Mapping[str, Limit],
    now: float,
) -> dict[str, Wait]:
    """Each queued job's ``Wait`` (see the module doc). ``queue`` rows: job_id,
    limit_key, queue_at, eta_p50, eta_confidence, in claim order."""
    out: dict[str, Wait] = {}
    free_at = [now] * max(slots - len(running), 0)
    key_ends: dict[str | None, list[float]] = {}
    known = slots > 0
    for job in running:
        if job.remaining_s is None:
            known = False
            end = now
        else:
            end = now + max(job.remaining_s, 0.0)
        if len(free_at) < slots:
            free_at.append(end)
        if job.limit_key is not None:
            key_ends.setdefault(job.limit_key, []).append(end)
    free_at.sort()
    for ends in key_ends.values():
        heapq.heapify(ends)
    key_starts: dict[str | None, list[float]] = {}
    for row in queue:
        job_id, key = row["job_id"], row.get("limit_key")
        due = float(row.get("queue_at") or now)
        limit = limits.get(key) if key is not None else None
        cap = limit.max_running if limit is not None else None
        t = max(now, due, free_at[0] if free_at else now)
        ends = key_ends.setdefault(key, []) if cap is not None else []
        while cap is not None and len(ends) > max(cap, 1):  # the cap was lowered
            heapq.heappop(ends)
        if cap == 0:
            t = float("inf")  # a paused key: it starts when someone raises the cap
        elif cap is not None and len(ends) >= cap:
            t = max(t, ends[0])
        starts = key_starts.setdefault(key, []) if limit is not None else []
        if limit is not None and limit.per_second is not None:
            recent = sorted(s for s in starts if s > t - 1.0)
            if len(recent) >= limit.per_second:
                t = max(t, recent[-limit.per_second] + 1.0)
        out[job_id] = Wait(
            start_in_s=(t - now) if known and t != float("inf") else None,
            reason=_reason(now, due, limit),
        )
        p50 = row.get("eta_p50")
        if not isinstance(p50, (int, float)) or row.get("eta_confidence") == "prior":
            known = False  # everything behind it waits on a guess
            p50 = p50 if isinstance(p50, (int, float)) else 0.0
        if t == float("inf"):
            continue
        end = t + float(p50)
        if free_at:  # the slot freed last before t: earlier ones stay for the jobs behind
            free_at.pop(bisect.bisect_right(free_at, t) - 1)
            bisect.insort(free_at, end)
        if cap is not None:
            if len(ends) >= cap:
                heapq.heapreplace(ends, end)
            else:
                heapq.heappush(ends, end)
        starts.append(t)
    return out


def _reason(now: float, due: float, limit: Limit | None) -> str | None:
    """What holds the job right now: its delay, else its key's limit, else nothing said."""
    if due > now + 0.5:
        return delay_text(due - now)
    if limit is not None and is_full(limit):
        return waiting_text(limit)
    return None


def kinds_served(runners: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    """The kinds the given workers announced they claim."""
    return frozenset(
        str(kind) for r in runners if r.get("role") == "worker" for kind in r.get("kinds") or ()
    )


def unserved_text(kind: str) -> str:
    """What holds a queued job that no live worker claims."""
    return f"no worker serves {kind}"


def worker_slots(runners: Sequence[Mapping[str, Any]], *, now: float, stale_s: float) -> int:
    """The slots of the live workers (those that beat within ``stale_s``)."""
    return sum(
        int(r.get("slots") or 1)
        for r in runners
        if r.get("role") == "worker" and now - float(r.get("beat_at") or 0) <= stale_s
    )
