"""Canonical JSON: what counts as JSON, and every byte form nw hashes or stores.

What is JSON (``first_unjsonable``): None, bool, int, finite float, str, a
mapping with string keys, a list or tuple, recursively, with no cycle. NaN
and the infinities are not: JSON has no spelling for them, a store refuses
them, and a NaN is not equal to itself so it can identify nothing.

Each form is one explicit choice, made here and nowhere else:

==========  ===========================  ======  =========  =========  ==============
form        hashes or writes             keys    separator  non-ASCII  1.0
==========  ===========================  ======  =========  =========  ==============
ID_FORM     params -> job id basis       sorted  compact    \\u-escaped  written ``1``
PLAN_FORM   nw's own plan identity,      sorted  compact    kept       written ``1``
            rate-table digests
FALAW_FORM  a falaw plan's identity      sorted  ``, ``     \\u-escaped  kept ``1.0``
            (``falaw.plan_hash``)                ``: ``
stored      store documents (no          as is   compact    \\u-escaped  kept
            identity; ``stored_json``)
==========  ===========================  ======  =========  =========  ==============

Why they differ: every stored job id is a hash of ``ID_FORM`` or ``PLAN_FORM``
text, so their escaping and spacing are frozen (``tests/unit/test_known_ids.py``
pins ids); ``FALAW_FORM`` is ``falaw.canonical.canonical_blob`` byte for byte,
so nw and falaw name a falaw plan alike without nw importing falaw, and like
falaw it refuses a nested mapping that is not a ``dict``. Every hashed form
refuses what is not JSON; ``stored_json`` relies on the encoder's own checks
(it sits on every store write, and identity never reads it).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nw.errors import InvalidType

_EXIT = object()


class NotJson(InvalidType):
    """A value with no canonical JSON form; ``path`` says where, ``what`` what."""

    def __init__(self, path: str, what: str):
        super().__init__(f"{path} is not JSON ({what})")
        self.path = path
        self.what = what


_LEAVES = frozenset({str, bool, int, type(None)})
"""The exact types that are JSON as they are (their subclasses take the long way)."""


def first_unjsonable(value: Any, path: str, *, dicts_only: bool = False) -> tuple[str, str] | None:
    """``(path, what)`` of the first value that is not JSON, else None.

    Iterative, so nesting deeper than Python's recursion limit is judged, not
    crashed on. ``dicts_only`` refuses a mapping that is not a ``dict``, as
    ``json.dumps`` (and so falaw) does. It sits on every enqueue and every
    finish: plain values are judged by their exact type first, and a path is
    spelled only for the value it reports.
    """
    on_path: set[int] = set()
    stack: list[Any] = [(value, path)]
    while stack:
        node, where = stack.pop()
        kind = type(node)
        if kind in _LEAVES:
            continue
        if node is _EXIT:
            on_path.discard(where)
            continue
        if kind is not dict and kind is not list and kind is not tuple:
            if isinstance(node, (str, bool, int)):
                continue
            if isinstance(node, float):
                if not math.isfinite(node):
                    return _spelled(where), repr(float(node))
                continue
            if not isinstance(node, (Mapping, list, tuple)):
                return _spelled(where), f"a {kind.__name__}"
            if isinstance(node, Mapping) and dicts_only and not isinstance(node, dict):
                return _spelled(where), f"a {kind.__name__}, not a dict"
        if id(node) in on_path:
            return _spelled(where), "a circular reference"
        on_path.add(id(node))
        stack.append((_EXIT, id(node)))
        if kind is dict or (kind is not list and kind is not tuple and isinstance(node, Mapping)):
            for key in node:
                if type(key) is not str and not isinstance(key, str):
                    return f"{_spelled(where)}[{key!r}]", "a non-string key"
            children = [(v, (where, ".", k)) for k, v in node.items()]
        else:
            children = [(v, (where, "[", i)) for i, v in enumerate(node)]
        stack.extend(reversed(children))  # report the first offender in order
    return None


def _spelled(where: str | tuple) -> str:
    """A path as ``first_unjsonable`` reports it: ``params.a[2].b``."""
    parts: list[str] = []
    while isinstance(where, tuple):
        where, how, key = where
        parts.append(f".{key}" if how == "." else f"[{key}]")
    return where + "".join(reversed(parts))


def is_json(value: Any) -> bool:
    return first_unjsonable(value, "value") is None


def jsonable(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with each value that is not JSON replaced by its ``repr``:
    what a body reported is kept readable rather than refused."""
    return {k: (v if is_json(v) else repr(v)) for k, v in fields.items()}


def _integral_as_int(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {k: _integral_as_int(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_integral_as_int(v) for v in value]
    return value


@dataclass(frozen=True)
class JsonForm:
    """One canonical byte form (see the module doc's table)."""

    ensure_ascii: bool
    separators: tuple[str, str]
    integral_as_int: bool
    """``1.0`` and ``-0.0`` written as the integers they equal (one number, one text)."""
    dicts_only: bool = False

    def dumps(self, value: Any, path: str = "value") -> str:
        """The canonical text, or ``NotJson`` naming the first offending value."""
        found = first_unjsonable(value, path, dicts_only=self.dicts_only)
        if found is not None:
            raise NotJson(*found)
        if self.integral_as_int:
            value = _integral_as_int(value)
        try:
            text = json.dumps(
                value,
                sort_keys=True,
                separators=self.separators,
                ensure_ascii=self.ensure_ascii,
                allow_nan=False,
            )
            text.encode("utf-8")
        except (ValueError, UnicodeEncodeError) as exc:  # a huge int, a lone surrogate
            raise NotJson(path, f"{type(exc).__name__}: {exc}") from None
        return text

    def sha256(self, value: Any, path: str = "value") -> str:
        return hashlib.sha256(self.dumps(value, path).encode("utf-8")).hexdigest()


ID_FORM = JsonForm(ensure_ascii=True, separators=(",", ":"), integral_as_int=True)
PLAN_FORM = JsonForm(ensure_ascii=False, separators=(",", ":"), integral_as_int=True)
FALAW_FORM = JsonForm(
    ensure_ascii=True, separators=(", ", ": "), integral_as_int=False, dicts_only=True
)


def stored_json(value: Any) -> str:
    """A store document: compact, keys in the order given, no NaN."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)
