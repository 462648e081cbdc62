"""The facade's checks of a caller's arguments: each returns the value in its
stored form or raises ``InvalidType``/``InvalidValue`` naming the argument.

The door for text (every string a caller gives is judged here before any store
sees it; the character classes are ``nw.canonical``'s):

- no string holds a NUL or a lone surrogate: not a params value or key at any
  depth, not a name, not a filter;
- a name (kind, actor id and handle, idempotency key, limit key, params key)
  or a label also holds no control character (``nw.canonical.CONTROL``: C0,
  DEL, C1, the line separators, the bidirectional overrides);
- the sizes below are stated once, here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nw import canonical
from nw.errors import InvalidType, InvalidValue
from nw.jobs.core import ids
from nw.jobs.core.model import (
    Status,
)

MAX_DEPTH = 32
"""Levels of nesting in params (``{}`` is one, ``{"a": []}`` two)."""

MAX_LABEL_CHARS = 500
"""A label (one a caller gives, or one read from its params)."""

MAX_NAME_CHARS = 200
"""A kind, an actor's id or handle, and each filter of ``list_jobs`` (``q`` too)."""

MAX_KEY_CHARS = 500
"""An idempotency key (a limit key has ``nw.jobs.core.limits.MAX_KEY_LEN``)."""

MAX_INT = 10**308
"""The largest integer params may hold: a number a float (and any JSON reader) can carry."""

MAX_EPOCH_S = 253_402_300_799.0
"""``not_before``'s latest: 9999-12-31 23:59:59 UTC, the last second a date can name."""


def check_name(value: Any, name: str, max_chars: int = MAX_NAME_CHARS) -> str:
    """A non-empty string of at most ``max_chars`` with no control character,
    else ``InvalidType``/``InvalidValue`` naming ``name`` and the problem."""
    if not isinstance(value, str):
        raise InvalidType(f"{name} must be a string, not {type(value).__name__}")
    if not value:
        raise InvalidValue(f"{name} must not be empty")
    if len(value) > max_chars:
        raise InvalidValue(f"{name} is {len(value)} characters long; the limit is {max_chars}")
    problem = canonical.text_problem(value)
    if problem is not None:
        raise InvalidValue(f"{name} has {problem}")
    return value


def check_label(label: Any) -> str | None:
    """A caller's label (None or empty: the job's own is derived)."""
    if label is None or label == "":
        return None
    return check_name(label, "label", MAX_LABEL_CHARS)


def derived_label(title: str) -> str:
    """A label read from ``params["title"]`` (or ``"label"``), which may hold a
    newline or a tab: each control character a space, cut to ``MAX_LABEL_CHARS``."""
    text = canonical.CONTROL.sub(" ", title)
    return text if len(text) <= MAX_LABEL_CHARS else text[: MAX_LABEL_CHARS - 1] + "…"


def check_params(params: Mapping[str, Any]) -> None:
    """Params that are JSON (``ids.check_json_params`` judged them) are also
    storable: no deeper than ``MAX_DEPTH``, no NUL or lone surrogate in any
    string, no control character in any key; else ``InvalidValue`` naming where."""
    stack: list[tuple[Any, Any, int]] = [(params, "params", 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, str):
            problem = canonical.text_problem(node, controls=False)
            if problem is not None:
                raise InvalidValue(f"{canonical.spelled(where)} has {problem}")
            continue
        if isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_INT:
            raise InvalidValue(f"{canonical.spelled(where)} is a number past ±1e308")
        if isinstance(node, Mapping):
            children = list(node.items())
        elif isinstance(node, (list, tuple)):
            children = [(i, v) for i, v in enumerate(node)]
        else:
            continue
        if depth > MAX_DEPTH:
            raise InvalidValue(f"params are nested deeper than {MAX_DEPTH} levels")
        for key, value in children:
            if isinstance(node, Mapping):
                problem = canonical.text_problem(key)
                if problem is not None:
                    at = canonical.spelled((where, ".", key))
                    raise InvalidValue(f"the params key at {at} has {problem}")
                stack.append((value, (where, ".", key), depth + 1))
            else:
                stack.append((value, (where, "[", key), depth + 1))


def check_actor(actor: Any) -> dict[str, str] | None:
    if actor is None:
        return None
    if isinstance(actor, str):
        return {"id": check_name(actor, "actor")}
    if isinstance(actor, Mapping) and actor.get("id"):
        out = {"id": check_name(str(actor["id"]), "actor id")}
        if actor.get("handle"):
            out["handle"] = check_name(str(actor["handle"]), "actor handle")
        return out
    raise InvalidType("actor must be an id string or a mapping with 'id' (and 'handle')")


def could_name_a_job(job_id: object) -> bool:
    """False for a string that cannot be one of our ids: the seed's reads answer
    "unknown" for it, and it never reaches a path, a store or SQL."""
    if not isinstance(job_id, str):
        raise InvalidType(f"job_id must be a string, not {type(job_id).__name__}")
    return ids.is_job_id(job_id)


def check_status(status: str | Status | None) -> str | None:
    if status is None:
        return None
    try:
        return Status(status).value
    except ValueError:
        valid = ", ".join(s.value for s in Status)
        raise InvalidValue(f"unknown status {status!r}; one of: {valid}") from None


def check_priority(priority: Any) -> int:
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidType(f"priority must be an int, not {type(priority).__name__}")
    if not -1_000_000 <= priority <= 1_000_000:
        raise InvalidValue(f"priority must be from -1000000 to 1000000, got {priority}")
    return priority


def check_not_before(when: Any) -> float | None:
    """Epoch seconds of a delay (an aware datetime or a number), or None."""
    if when is None:
        return None
    if isinstance(when, datetime):
        if when.tzinfo is None:
            raise InvalidValue("not_before must be an aware datetime (a naive one has no zone)")
        return when.timestamp()
    if isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when):
        raise InvalidType(f"not_before must be epoch seconds or a datetime, not {when!r}")
    if not 0 <= when <= MAX_EPOCH_S:
        raise InvalidValue(f"not_before must be from 0 to {MAX_EPOCH_S:.0f} (9999), got {when}")
    return float(when)


GRADES = ("ok", "notice", "warning", "error")


def check_grade(grade: str | None) -> str | None:
    if grade is None or grade in GRADES:
        return grade
    raise InvalidValue(f"unknown grade {grade!r}; one of: {', '.join(GRADES)}")


def check_text(value: str | None, name: str, max_chars: int = MAX_NAME_CHARS) -> str | None:
    """A filter: None or empty is no filter; else as ``check_name``."""
    if value is None or value == "":
        return None
    return check_name(value, name, max_chars)


def check_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidValue(f"limit must be an int from 1 to 10000, got {limit!r}")
    return limit


def named(exc: BaseException, name: str) -> BaseException:
    """``exc`` (same type, same attributes) with its message naming the item or
    step of a batch it is about (``item 3: ...``, ``step 'cut': ...``)."""
    first = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    exc.args = (f"{name}: {first}", *exc.args[1:])
    return exc
