"""The facade's checks of a caller's arguments: each returns the value in its
stored form or raises ``InvalidType``/``InvalidValue`` naming the argument."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nw.errors import InvalidType, InvalidValue
from nw.jobs import ids
from nw.jobs.model import (
    Status,
)


def _actor(actor: Any) -> dict[str, str] | None:
    if actor is None:
        return None
    if isinstance(actor, str):
        return {"id": actor}
    if isinstance(actor, Mapping) and actor.get("id"):
        out = {"id": str(actor["id"])}
        if actor.get("handle"):
            out["handle"] = str(actor["handle"])
        return out
    raise InvalidType("actor must be an id string or a mapping with 'id' (and 'handle')")


def _could_name_a_job(job_id: object) -> bool:
    """False for a string that cannot be one of our ids: the seed's reads answer
    "unknown" for it, and it never reaches a path, a store or SQL."""
    if not isinstance(job_id, str):
        raise InvalidType(f"job_id must be a string, not {type(job_id).__name__}")
    return ids.is_job_id(job_id)


def _check_status(status: str | Status | None) -> str | None:
    if status is None:
        return None
    try:
        return Status(status).value
    except ValueError:
        valid = ", ".join(s.value for s in Status)
        raise InvalidValue(f"unknown status {status!r}; one of: {valid}") from None


def _check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidType(f"priority must be an int, not {type(priority).__name__}")
    if not -1_000_000 <= priority <= 1_000_000:
        raise InvalidValue(f"priority must be from -1000000 to 1000000, got {priority}")
    return priority


def _check_not_before(when: Any) -> float | None:
    """Epoch seconds of a delay (an aware datetime or a number), or None."""
    if when is None:
        return None
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise InvalidValue("not_before must be an aware datetime (a naive one has no zone)")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        raise InvalidType(f"not_before must be epoch seconds or a datetime, not {when!r}")
    return float(when)


GRADES = ("ok", "notice", "warning", "error")


def _check_grade(grade: str | None) -> str | None:
    if grade is None or grade in GRADES:
        return grade
    raise InvalidValue(f"unknown grade {grade!r}; one of: {', '.join(GRADES)}")


def _check_text(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidType(f"{name} must be a string, not {type(value).__name__}")
    return value or None


def _check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidValue(f"limit must be an int from 1 to 10000, got {limit!r}")
    return limit
