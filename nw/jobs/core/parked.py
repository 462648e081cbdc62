"""Parked jobs: a body handed its work to a provider's queue and let its slot go (pure).

A body returns ``Submitted(request_id, provider="fal")`` once the provider has
the request. The attempt's slot is freed at once; the job stays ``running``
(the seed's vocabulary) and its record carries ``parked`` (what it waits on,
the provider's queue position, when it was parked, its deadline) until a
``poll`` or a webhook says how it ended. This module holds the values a body
and a kind's handlers speak (``Submitted``, ``Pending``), the record fields a
park writes, the poll back-off, and how a parked job reads ("waiting on fal,
3rd in queue"). The store keeps the poll schedule beside the job (the
``parked`` table: due time, a short look lease, a webhook kept until applied);
``nw.jobs.execution.poller`` works it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nw.errors import InvalidType, InvalidValue

PARKED_FIELD = "parked"
"""The record's doc field while a job is parked (None or absent otherwise)."""

FIRST_POLL_S = 2.0
"""The first poll of a parked job comes this long after the park."""
MAX_POLL_S = 15.0
"""Back-off ceiling between two polls of one job (completion is noticed within it)."""
WEBHOOK_FIRST_POLL_S = 30.0
WEBHOOK_POLL_S = 60.0
"""With a webhook on its way, a poll is only the safety net: the first after
``WEBHOOK_FIRST_POLL_S``, then doubling up to this."""
LOOK_S = 30.0
"""A poller's lease on the parked jobs it took for one look: another process
takes them only once it lapsed (the poller died mid-look)."""
PROVIDER_PHASE = ":provider"
"""Suffix of the ETA keys that learn the provider phase (park to finish),
apart from the submit step's keys."""


@dataclass(frozen=True)
class Submitted:
    """What a body returns once the provider holds the request: park the job.

    ``deadline_s``: seconds from now after which the job is cancelled at the
    provider and fails "timed out at the provider"; ``position``: the
    provider's queue position as the submit answered, if it said."""

    request_id: str
    provider: str = "fal"
    deadline_s: float | None = None
    position: int | None = None

    def __init__(
        self,
        request_id: str,
        *,
        provider: str = "fal",
        deadline_s: float | None = None,
        position: int | None = None,
    ):
        if not isinstance(request_id, str) or not request_id or "\x00" in request_id:
            raise InvalidValue("Submitted needs the provider's request id (a non-empty string)")
        if not isinstance(provider, str) or not provider.strip():
            raise InvalidValue("Submitted: provider must be a non-empty name")
        if deadline_s is not None and not _positive(deadline_s):
            raise InvalidValue(f"Submitted: deadline_s must be > 0 seconds, got {deadline_s!r}")
        _check_position(position, "Submitted")
        object.__setattr__(self, "request_id", request_id)
        object.__setattr__(self, "provider", provider)
        object.__setattr__(self, "deadline_s", deadline_s)
        object.__setattr__(self, "position", position)


@dataclass(frozen=True)
class Pending:
    """What ``poll`` (or ``on_webhook``) returns while the provider still works:
    its queue position (0: running now) and its own estimate, when it says."""

    position: int | None = None
    eta_s: float | None = None

    def __post_init__(self) -> None:
        _check_position(self.position, "Pending")
        if self.eta_s is not None and not (_number(self.eta_s) and self.eta_s >= 0):
            raise InvalidValue(f"Pending: eta_s must be >= 0 seconds, got {self.eta_s!r}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: Any) -> bool:
    return _number(value) and value > 0


def _check_position(position: Any, who: str) -> None:
    if position is None:
        return
    if isinstance(position, bool) or not isinstance(position, int):
        raise InvalidType(f"{who}: position must be a whole number, got {position!r}")
    if position < 0:
        raise InvalidValue(f"{who}: position must be >= 0, got {position}")


def park_fields(submitted: Submitted, *, now: float, webhook: bool) -> dict[str, Any]:
    """The record fields a park writes: what the job waits on, and ``resume``
    (so a retry re-attaches to the request instead of paying for a new one)."""
    deadline_at = None if submitted.deadline_s is None else now + float(submitted.deadline_s)
    return {
        PARKED_FIELD: {
            "provider": submitted.provider,
            "request_id": submitted.request_id,
            "since": now,
            "position": submitted.position,
            "deadline_at": deadline_at,
            "webhook": webhook,
            "start_position": submitted.position,
            "eta_at": None,
        },
        "resume": {"request_id": submitted.request_id, "provider": submitted.provider},
    }


def pending_fields(
    parked: Mapping[str, Any], pending: Pending | None, *, now: float
) -> dict[str, Any] | None:
    """The ``parked`` field after a poll said ``pending``; None when nothing it shows changed."""
    if pending is None:
        return None
    kept = parked.get("eta_at")
    start = parked.get("start_position")
    if start is None and pending.position is not None:
        start = pending.position  # the first position the job was told
    eta_at = kept  # a poll that says nothing new does not make the ETA unknown
    if pending.eta_s is not None:  # the provider's own estimate
        eta_at = round(now + float(pending.eta_s), 1)
    else:
        by_queue = queue_eta_s(parked.get("provider_s"), start, pending.position)
        if by_queue is not None:
            eta_at = round(now + by_queue, 1)
    if parked.get("position") == pending.position and kept == eta_at:
        return None
    return {
        PARKED_FIELD: {
            **parked,
            "position": pending.position,
            "start_position": start,
            "eta_at": eta_at,
        }
    }


def queue_eta_s(provider_s: Any, start: Any, position: Any) -> float | None:
    """Seconds left by the queue: the learned provider phase (park to result,
    ``provider_s``, learned from jobs parked at about ``start`` in the queue)
    scaled by how much of the queue is left, ``(position + 1) / (start + 1)``.
    At the park it is the whole phase; running at the provider (position 0)
    it is one place's share of it; a queue that does not move keeps it where it
    is. None without a learned phase or a position."""
    if not _number(provider_s) or not isinstance(position, int) or isinstance(position, bool):
        return None
    first = start if isinstance(start, int) and not isinstance(start, bool) else position
    first = max(first, position)
    return float(provider_s) * (position + 1) / (first + 1)


def next_poll_in(polls: int, *, webhook: bool, pending: Pending | None = None) -> float:
    """Seconds to the next poll after ``polls`` polls: doubling from
    ``FIRST_POLL_S`` up to ``MAX_POLL_S``, never long after the provider's own
    estimate; from ``WEBHOOK_FIRST_POLL_S`` up to ``WEBHOOK_POLL_S`` when a
    webhook will say it first."""
    if webhook:
        return min(WEBHOOK_FIRST_POLL_S * (2 ** max(polls, 0)), WEBHOOK_POLL_S)
    wait = min(FIRST_POLL_S * (2 ** max(polls, 0)), MAX_POLL_S)
    if pending is not None and pending.eta_s is not None and not webhook:
        wait = min(wait, max(float(pending.eta_s), FIRST_POLL_S))
    return wait


def is_parked(record: Mapping[str, Any]) -> bool:
    return isinstance(record.get(PARKED_FIELD), Mapping)


_SUFFIX = {1: "st", 2: "nd", 3: "rd"}


def ordinal(n: int) -> str:
    if 10 <= n % 100 <= 20:
        return f"{n}th"
    return f"{n}{_SUFFIX.get(n % 10, 'th')}"


def waiting_text(parked: Mapping[str, Any]) -> str:
    """How a parked job reads: "waiting on fal, 3rd in queue" (0: "running at fal")."""
    provider = str(parked.get("provider") or "the provider")
    position = parked.get("position")
    if isinstance(position, int) and not isinstance(position, bool):
        if position == 0:
            return f"waiting on {provider}, running there"
        return f"waiting on {provider}, {ordinal(position)} in queue"
    return f"waiting on {provider}"


def eta_of(parked: Mapping[str, Any], now: float) -> float | None:
    """Seconds left by the provider's estimate or the learned provider phase (``eta_at``)."""
    at = parked.get("eta_at")
    if not isinstance(at, (int, float)) or not _number(at):
        return None
    return max(float(at) - now, 0.0)


def provider_keys(eta_keys: Any) -> list[str]:
    """The ETA keys the provider phase of a job learns under (``<key>:provider``)."""
    return [f"{k}{PROVIDER_PHASE}" for k in eta_keys or () if isinstance(k, str) and k]
