"""The store's part in parked provider jobs: the contract and what both engines share.

A parked job (``nw.jobs.core.parked``) keeps its poll schedule in the
``parked`` table beside it: the attempt that parked, the provider's request
id, when it is next looked at, a poller's short lease on it, its deadline, and
a webhook payload kept until a look applies it. ``ParkedStore`` is what the
poller, the body runner and the webhook route ask of a store; each engine has
its own park, look and put-back (``sqlite_parked.SqliteParking``,
``pg_parked.PgParking``, mixed into its store class); the webhook, the count
and the prune are written once over the store's connector
(``shared.SharedStore``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from nw.jobs.core.records import JobRow

Kept = Literal["kept", "noted", "ignored"]
"""What became of a webhook: kept for a park not yet recorded, noted for a
parked job (its next look applies it), or ignored (unknown job, finished, or
another attempt's)."""


@dataclass(frozen=True)
class Look:
    """One parked job a poller took for one look (under its lease)."""

    row: JobRow
    request_id: str
    attempt: int
    polls: int
    deadline_at: float | None
    webhook: Any
    """The provider's payload kept for it (decoded), or None."""
    seen: Any
    """The payload as stored, handed back to ``repark`` (dropped only if unchanged)."""


@dataclass(frozen=True)
class Park:
    """A job's attempt parked on a provider: its request id, its first look at
    ``due_at``, its ``deadline_at``, and the record fields written with it
    (``parked``, ``resume``)."""

    job_id: str
    attempt: int
    kind: str
    request_id: str
    due_at: float
    deadline_at: float | None
    fields: Mapping[str, Any]


@dataclass(frozen=True)
class Repark:
    """A look's end that left the job parked: its next look at ``due_at``."""

    job_id: str
    attempt: int
    due_at: float
    seen: Any = None
    parked: Mapping[str, Any] | None = None
    """The job's new ``parked`` field (a queue position moved), written in the
    same transaction; None: unchanged."""


@runtime_checkable
class ParkedStore(Protocol):
    def park(self, p: Park, *, now: float) -> bool:
        """Record a park, fenced by its attempt (False: the job moved on or ended)."""
        ...

    def look_parked(
        self, kinds: Sequence[str], *, now: float, look_s: float, limit: int
    ) -> list[Look]:
        """Take up to ``limit`` parked jobs of ``kinds`` due for a look, each under
        a lease of ``look_s`` seconds (another poller skips them meanwhile)."""
        ...

    def repark(self, items: Sequence[Repark], *, now: float) -> None: ...

    def keep_webhook(self, job_id: str, attempt: int, payload: Any, *, now: float) -> Kept: ...

    def parked_count(self) -> int: ...

    def prune_parked(self, *, before: float) -> int: ...


def look_of(r: Mapping[str, Any], row: JobRow, webhook: Any) -> Look:
    return Look(
        row=row,
        request_id=str(r["p_request_id"]),
        attempt=int(r["p_attempt"]),
        polls=int(r["p_polls"]),
        deadline_at=r["p_deadline_at"],
        webhook=webhook,
        seen=r["p_webhook"],
    )
