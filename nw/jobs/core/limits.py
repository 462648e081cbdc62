"""Scarce providers: a job's limit key, what a limit allows now, and how a wait reads (pure).

A kind registered with ``limit_key`` (a string, a ``str.format`` template over
the params such as ``"fal:{model}"``, or a callable of the params) gives each
of its jobs a key at enqueue; a limit set on that key (``jobs.set_limit``)
caps how many of its jobs run at once (``max_running``) and how many start in
any one second (``per_second``), across every worker. The stores enforce it
at claim, under a lock on the key's limit row (see the store modules); this
module only decides, from counts the store read under that lock, which of
the candidate jobs may start.

Why a sliding window for ``per_second`` and not a token bucket: the promise
is "no more than N starts in any one-second window". A token bucket refilled
at N per second with room for a burst of N lets almost 2N start across one
window (a full bucket spent, then a second's refill); with room for a burst of
1 it keeps the promise but spaces every start 1/N apart. The window keeps the
start times of the key's last second (at most N floats in its limit row), so
a burst of N goes at once and the N+1st waits until the oldest is a second old.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nw.canonical import text_problem
from nw.errors import InvalidType, InvalidValue

LimitKeySpec = str | Callable[[Mapping[str, Any]], Any] | None
MAX_KEY_LEN = 200
RATE_WINDOW_S = 1.0
#: How many rounds a claim reads candidates: a round that finds a key full
#: is followed by one that passes over that key (both stores, one bound).
CLAIM_ROUNDS = 4


@dataclass(frozen=True)
class Limit:
    """A key's limit as ``jobs.limits`` reports it."""

    key: str
    max_running: int | None
    per_second: int | None
    running: int = 0
    started_last_s: int = 0


@dataclass(frozen=True)
class NotYet:
    """``start`` of an in-process job that may not start yet: retry at ``retry_at``."""

    retry_at: float
    why: str


def check_spec(spec: LimitKeySpec) -> LimitKeySpec:
    """A kind's ``limit_key`` as ``register_kind`` takes it (checked once, there)."""
    if spec is None or callable(spec):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidValue("limit_key must be a non-empty string, a template or a callable")
    try:
        list(string.Formatter().parse(spec))
    except ValueError as exc:
        raise InvalidValue(f"limit_key template {spec!r} is malformed: {exc}") from None
    return spec


def key_for(spec: LimitKeySpec, kind: str, params: Mapping[str, Any]) -> str | None:
    """The limit key of one job (None: it counts against no limit)."""
    if spec is None:
        return None
    try:
        key = spec(params) if callable(spec) else spec.format(**params)
    except (KeyError, IndexError, AttributeError, ValueError) as exc:
        raise InvalidValue(
            f"kind {kind!r}: its limit_key {spec!r} cannot be filled from these params "
            f"({type(exc).__name__}: {exc})"
        ) from None
    if key is None:
        return None
    return check_key(key)


def check_key(key: Any) -> str:
    if not isinstance(key, str):
        raise InvalidType(f"a limit key must be a string, not {type(key).__name__}")
    if not key.strip() or len(key) > MAX_KEY_LEN:
        raise InvalidValue(f"a limit key must be 1 to {MAX_KEY_LEN} characters, got {key!r}")
    if (problem := text_problem(key)) is not None:
        raise InvalidValue(f"a limit key has {problem}")
    return key


def check_limit(max_running: Any, per_second: Any) -> tuple[int | None, int | None]:
    """Validated (max_running, per_second): ints, ``max_running >= 0`` (0 pauses
    the key), ``per_second >= 1``; None leaves that cap off."""
    for name, value, low in (("max_running", max_running, 0), ("per_second", per_second, 1)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidType(f"{name} must be an int or None, not {type(value).__name__}")
        if value < low or value > 1_000_000:
            raise InvalidValue(f"{name} must be from {low} to 1000000, got {value}")
    return max_running, per_second


def room(running_room: int | None, rate_room: int | None) -> int | None:
    """How many more jobs of a key may start now (None: no cap)."""
    caps = [max(int(r), 0) for r in (running_room, rate_room) if r is not None]
    return min(caps) if caps else None


def admit(
    candidates: Sequence[tuple[str, str]], rooms: Mapping[str, int | None]
) -> tuple[list[str], list[str]]:
    """(the candidate job ids that may start, in order; the keys left full).

    ``candidates`` are (job id, key) in claim order; ``rooms`` is each key's
    room read under its lock (a key without a row has no limit any more)."""
    left = dict(rooms)
    admitted: list[str] = []
    full: set[str] = set()
    for job_id, key in candidates:
        free = left.get(key)
        if key not in left or free is None:
            admitted.append(job_id)
        elif free > 0:
            admitted.append(job_id)
            left[key] = free - 1
        else:
            full.add(key)
    full.update(k for k, v in left.items() if v == 0)
    return admitted, sorted(full)


def is_full(limit: Limit) -> bool:
    """No job of the key may start now (as last read)."""
    return (limit.max_running is not None and limit.running >= limit.max_running) or (
        limit.per_second is not None and limit.started_last_s >= limit.per_second
    )


def waiting_text(limit: Limit) -> str:
    """How a queued job held by its key's limit reads ("waiting: fal:kling at 2 of 2")."""
    if limit.max_running is not None and limit.running >= limit.max_running:
        return f"waiting: {limit.key} at {limit.running} of {limit.max_running}"
    if limit.per_second is not None and limit.started_last_s >= limit.per_second:
        return f"waiting: {limit.key} at {limit.per_second}/s"
    return f"waiting: {limit.key}"


def delay_text(seconds: float) -> str:
    """How a queued job that is not due yet reads ("starts in 40s")."""
    s = max(seconds, 0.0)
    if s < 90:
        return f"starts in {max(round(s), 1)}s"
    if s < 5400:
        return f"starts in {round(s / 60)}m"
    return f"starts in {s / 3600:.1f}h"
