"""The plan contract as plain data, and its canonical identity ``plan_hash``.

A plan is a mapping with ``calls``, in order; each call is a mapping with
``tool``, ``application`` (the model), ``arguments`` and ``output_kind``, and
optionally ``estimated_cost_usd`` (the figure frozen at plan time) and
``cost_basis`` (how that figure was priced)::

    {"calls": [{"tool": "generate_image", "application": "fal-ai/flux/dev",
                "arguments": {"prompt": "a tiger"}, "output_kind": "image",
                "estimated_cost_usd": 0.025,
                "cost_basis": {"pricer": "rate_table", "priced": "fal-ai/flux/dev",
                               "quantities": {"megapixels": 1.0},
                               "table": "nw.fal", "table_version": "3f2a..."}}]}

This is also the shape ``falaw.plan_to_dict`` writes, and a live
``falaw.Plan`` is accepted wherever a plan is: it is turned into that dict
(falaw is never imported here; if the object is a falaw Plan, falaw is
already loaded).

Identity. Everything in a plan identifies it except the fields that only
*describe* it: the cost fields (so re-pricing never moves a job's identity),
plan-time cache status, labels (``metadata``) and catalogue-derived duration
hints. The rule is "identity by default": an unknown field is identifying,
so a plan can never be deduped under a key blind to something it carries.
``backend`` identifies only when it is not the default ``"fal"``, and
``key_extra`` / ``local_files`` only when non-empty, so the dict a person
writes and the dict falaw writes for the same calls hash the same.

Canonical form: JSON with sorted keys and no whitespace; a number with an
integral value is written as that exact integer (``1``, ``1.0`` and ``-0.0``
are one number), any other finite number as the shortest decimal that
round-trips its double; tuples are lists. A value with no such form — NaN,
an infinity, a set, bytes, a non-string key, an arbitrary object — raises
``NonCanonicalPlan``: a plan that cannot be identified is refused, never
hashed under a weaker key.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Mapping
from typing import Any

from nw.errors import NonCanonicalPlan, PlanError  # importable from here, as before

FALAW_PLAN_SCHEMA = "falaw.plan/v1"
"""The ``schema`` tag ``falaw.plan_to_dict`` writes; absent means the same shape."""
DEFAULT_BACKEND = "fal"
#: Call fields that describe a call without identifying it.
DESCRIPTIVE_CALL_FIELDS = frozenset(
    {
        "estimated_cost_usd",
        "cost_basis",
        "cache_status",
        "metadata",
        "expected_duration_s",
        "expected_wall_time_s",
    }
)
#: Plan-level fields that describe a plan without identifying it.
DESCRIPTIVE_PLAN_FIELDS = frozenset({"schema", "estimated_cost_usd", "total_cost_usd"})
_OMIT_WHEN_EMPTY = ("key_extra", "local_files")
_REQUIRED_STR = ("tool", "application", "output_kind")


def is_falaw_plan(value: Any) -> bool:
    """True for a live ``falaw.Plan`` (without importing falaw)."""
    module = sys.modules.get("falaw.plan")
    return module is not None and isinstance(value, module.Plan)


def as_plan_dict(plan: Any) -> dict[str, Any]:
    """The plan as a plain dict: a mapping is copied, a ``falaw.Plan`` becomes
    its ``plan_to_dict`` form; anything else raises ``PlanError``."""
    if is_falaw_plan(plan):
        return sys.modules["falaw.plan"].plan_to_dict(plan)
    if isinstance(plan, Mapping):
        return dict(plan)
    raise PlanError(
        f"a plan is a mapping with 'calls' (or a falaw.Plan), not {type(plan).__name__}"
    )


def read_plan(plan: Any) -> dict[str, Any]:
    """The plan as a dict whose shape is checked: ``PlanError`` names what is wrong."""
    out = as_plan_dict(plan)
    schema = out.get("schema")
    if schema is not None and schema != FALAW_PLAN_SCHEMA:
        raise PlanError(f"unknown plan schema {schema!r} (this nw reads {FALAW_PLAN_SCHEMA!r})")
    calls = out.get("calls")
    if not isinstance(calls, (list, tuple)):
        raise PlanError(f"plan['calls'] must be a list of calls, not {type(calls).__name__}")
    for i, call in enumerate(calls):
        if not isinstance(call, Mapping):
            raise PlanError(f"plan.calls[{i}] must be a mapping, not {type(call).__name__}")
        for name in _REQUIRED_STR:
            if not isinstance(call.get(name), str) or not call[name]:
                raise PlanError(f"plan.calls[{i}].{name} must be a non-empty string")
        if not isinstance(call.get("arguments"), Mapping):
            raise PlanError(f"plan.calls[{i}].arguments must be a mapping")
    out["calls"] = [dict(c) for c in calls]
    return out


def plan_identity(plan: Any) -> dict[str, Any]:
    """The part of a plan that identifies it, in canonical form."""
    read = read_plan(plan)
    calls = []
    for i, call in enumerate(read["calls"]):
        ident = {k: v for k, v in call.items() if k not in DESCRIPTIVE_CALL_FIELDS}
        if ident.get("backend", DEFAULT_BACKEND) == DEFAULT_BACKEND:
            ident.pop("backend", None)
        for name in _OMIT_WHEN_EMPTY:
            if name in ident and not ident[name]:
                del ident[name]
        calls.append(canonical(ident, f"plan.calls[{i}]"))
    rest = {k: v for k, v in read.items() if k != "calls" and k not in DESCRIPTIVE_PLAN_FIELDS}
    return {**canonical(rest, "plan"), "calls": calls}


def plan_hash(plan: Any) -> str:
    """A stable sha256 hex digest of the plan's identity (see the module doc).

    >>> a = {"calls": [{"tool": "t", "application": "m", "output_kind": "image",
    ...                 "arguments": {"n": 1, "p": "x"}, "estimated_cost_usd": 0.1}]}
    >>> b = {"calls": [{"arguments": {"p": "x", "n": 1.0}, "output_kind": "image",
    ...                 "application": "m", "tool": "t"}]}
    >>> plan_hash(a) == plan_hash(b)
    True
    """
    return hashlib.sha256(canonical_json(plan_identity(plan)).encode()).hexdigest()


def canonical_json(value: Any) -> str:
    """Sorted keys, no whitespace, numbers in canonical form; strict (see ``canonical``)."""
    return json.dumps(
        canonical(value, "value"),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )


def canonical(value: Any, path: str) -> Any:
    """``value`` with every number, string and container in canonical form, or
    ``NonCanonicalPlan`` naming the first value that has none."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NonCanonicalPlan(path, repr(float(value)))
        return int(value) if value.is_integer() else float(value)
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise NonCanonicalPlan(f"{path}[{key!r}]", "a non-string key")
            out[str.__str__(key)] = canonical(item, f"{path}.{key}")
        return out
    if isinstance(value, (list, tuple)):
        return [canonical(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise NonCanonicalPlan(path, f"a {type(value).__name__}")
