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

Identity. A plan in falaw's shape (only the fields ``falaw.plan_to_dict``
writes: ``schema`` and ``calls``, each call within ``FALAW_CALL_FIELDS``) is a
falaw plan, and its ``plan_hash`` is ``falaw.plan_hash``'s, byte for byte:
per call ``{app, args, tool}`` plus ``backend`` when not ``"fal"`` and
``key_extra`` when non-empty, in ``nw.canonical.FALAW_FORM`` (so ``1`` and
``1.0`` are different arguments there, as they are to falaw). A job's
``idempotency_key`` is then the hash a falaw user computes.

A plan that carries any other field is not a falaw plan (falaw would read it
blind to that field) and keeps nw's vendor-neutral contract: everything
identifies it except what only *describes* it (the cost fields, plan-time
cache status, labels, duration hints); an unknown field is identifying, so a
plan is never deduped under a key blind to something it carries; ``backend``
identifies only when not ``"fal"``, ``key_extra`` / ``local_files`` only when
non-empty. Its text is ``nw.canonical.PLAN_FORM``: sorted keys, no
whitespace, a number with an integral value written as that integer.

Either way a value with no canonical form (NaN, an infinity, a set, bytes, a
non-string key, a cycle; in a falaw plan also a nested mapping that is not a
``dict``, as falaw refuses) raises ``NonCanonicalPlan``: a plan that cannot
be identified is refused, never hashed under a weaker key.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Mapping
from typing import Any

from nw import canonical
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
#: Every call field ``falaw.plan_to_dict`` writes (falaw.plan/v1).
FALAW_CALL_FIELDS = frozenset(
    {
        "tool",
        "application",
        "backend",
        "arguments",
        "output_kind",
        "estimated_cost_usd",
        "cache_status",
        "expected_duration_s",
        "expected_wall_time_s",
        "metadata",
        "key_extra",
        "local_files",
        "cost_basis",
    }
)
FALAW_PLAN_FIELDS = frozenset({"schema", "calls"})
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


def is_falaw_form(plan: Mapping[str, Any]) -> bool:
    """True when a read plan has only fields falaw's plan dict has (see the module doc)."""
    return set(plan) <= FALAW_PLAN_FIELDS and all(
        set(call) <= FALAW_CALL_FIELDS for call in plan["calls"]
    )


def plan_identity_json(plan: Any) -> str:
    """The exact text ``plan_hash`` digests (see the module doc)."""
    read = read_plan(plan)
    try:
        if is_falaw_form(read):
            return canonical.FALAW_FORM.dumps(_falaw_identity(read), "plan")
        return canonical.PLAN_FORM.dumps(_neutral_identity(read), "plan")
    except canonical.NotJson as exc:
        raise NonCanonicalPlan(_call_path(exc.path), exc.what) from None


def _falaw_identity(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """``falaw.canonical.plan_identity_payload`` of each call, in order."""
    out = []
    for i, call in enumerate(plan["calls"]):
        payload = {"app": call["application"], "args": dict(call["arguments"])}
        payload["tool"] = call["tool"]
        backend = call.get("backend", DEFAULT_BACKEND)
        if backend != DEFAULT_BACKEND:
            payload["backend"] = backend
        key_extra = call.get("key_extra")
        if key_extra:
            if not isinstance(key_extra, Mapping):
                raise PlanError(f"plan.calls[{i}].key_extra must be a mapping")
            payload["key_extra"] = dict(key_extra)
        out.append(payload)
    return out


def _call_path(path: str) -> str:
    """A path in the falaw payload (``plan[0].args.x``) named as in the plan."""
    head, _, rest = path.partition("]")
    if not head.startswith("plan[") or not head[5:].isdigit():
        return path
    for short, field in (("args", "arguments"), ("app", "application")):
        if rest.startswith(f".{short}"):
            rest = f".{field}{rest[len(short) + 1 :]}"
    return f"plan.calls[{head[5:]}]{rest}"


def _neutral_identity(plan: dict[str, Any]) -> dict[str, Any]:
    """The part of a vendor-neutral plan that identifies it."""
    calls = []
    for call in plan["calls"]:
        ident = {k: v for k, v in call.items() if k not in DESCRIPTIVE_CALL_FIELDS}
        if ident.get("backend", DEFAULT_BACKEND) == DEFAULT_BACKEND:
            ident.pop("backend", None)
        for name in _OMIT_WHEN_EMPTY:
            if name in ident and not ident[name]:
                del ident[name]
        calls.append(ident)
    rest = {k: v for k, v in plan.items() if k != "calls" and k not in DESCRIPTIVE_PLAN_FIELDS}
    return {**rest, "calls": calls}


def plan_hash(plan: Any) -> str:
    """A stable sha256 hex digest of the plan's identity (see the module doc);
    ``falaw.plan_hash``'s own for a falaw plan.

    >>> a = {"calls": [{"tool": "t", "application": "m", "output_kind": "image",
    ...                 "arguments": {"n": 1, "p": "x"}, "estimated_cost_usd": 0.1}]}
    >>> b = {"calls": [{"arguments": {"p": "x", "n": 1}, "output_kind": "video",
    ...                 "application": "m", "tool": "t"}]}
    >>> plan_hash(a) == plan_hash(b)  # falaw's identity: {app, args, tool}
    True
    """
    return hashlib.sha256(plan_identity_json(plan).encode("utf-8")).hexdigest()
