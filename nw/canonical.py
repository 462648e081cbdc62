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

Text, the other choice made here (``text_problem``, ``escaped``): a string
nw stores holds no NUL (PostgreSQL's text and jsonb refuse it) and no lone
surrogate (it has no UTF-8 form, so no byte form at all); a name or a label
also holds no control character (``CONTROL``: C0, DEL, C1, the line and
paragraph separators, the bidirectional overrides). ``escaped`` is how such a
character reads when text nw did not write must be shown: ``\\x1b``, never
the byte itself.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
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
                    return spelled(where), repr(float(node))
                continue
            if not isinstance(node, (Mapping, list, tuple)):
                return spelled(where), f"a {kind.__name__}"
            if isinstance(node, Mapping) and dicts_only and not isinstance(node, dict):
                return spelled(where), f"a {kind.__name__}, not a dict"
        if id(node) in on_path:
            return spelled(where), "a circular reference"
        on_path.add(id(node))
        stack.append((_EXIT, id(node)))
        if kind is dict or (kind is not list and kind is not tuple and isinstance(node, Mapping)):
            for key in node:
                if type(key) is not str and not isinstance(key, str):
                    return f"{spelled(where)}[{key!r}]", "a non-string key"
            children = [(v, (where, ".", k)) for k, v in node.items()]
        else:
            children = [(v, (where, "[", i)) for i, v in enumerate(node)]
        stack.extend(reversed(children))  # report the first offender in order
    return None


def spelled(where: str | tuple) -> str:
    """A path as ``first_unjsonable`` reports it: ``params.a[2].b``; a key that
    is not a plain name reads as its ``repr`` (``params['a\\x1b']``), so a path
    never carries a control character or a lone surrogate into a message."""
    parts: list[str] = []
    while isinstance(where, tuple):
        where, how, key = where
        if how != ".":
            parts.append(f"[{key}]")
        elif isinstance(key, str) and key.isprintable() and len(key) <= 80 and "." not in key:
            parts.append(f".{key}")
        else:
            parts.append(f"[{_snippet(key)}]")
    return where + "".join(reversed(parts))


def _snippet(key: Any) -> str:
    """A key as a message shows it: its ``repr``, cut to 80 characters."""
    shown = repr(key)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def is_json(value: Any) -> bool:
    return first_unjsonable(value, "value") is None


def jsonable(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` with each value that is not JSON replaced by its ``repr``:
    what a body reported is kept readable rather than refused."""
    return {k: (v if is_json(v) else repr(v)) for k, v in fields.items()}


def _integral_as_int(value: Any) -> Any:
    """``value`` with each integral float an int; iterative, like ``first_unjsonable``,
    so no depth of nesting can exhaust the stack (``json.dumps`` then judges it)."""
    if not isinstance(value, (Mapping, list, tuple)):
        return int(value) if isinstance(value, float) and value.is_integer() else value
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        node, parent, slot = stack.pop()
        if isinstance(node, float) and node.is_integer():
            parent[slot] = int(node)
        elif isinstance(node, Mapping):
            copy: dict[str, Any] = dict.fromkeys(node)
            parent[slot] = copy
            stack.extend((v, copy, k) for k, v in node.items())
        elif isinstance(node, (list, tuple)):
            items: list[Any] = [None] * len(node)
            parent[slot] = items
            stack.extend((v, items, i) for i, v in enumerate(node))
        else:
            parent[slot] = node
    return root[0]


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
        except RecursionError:  # nested deeper than the encoder's stack allows
            raise NotJson(path, "nested too deep to encode") from None
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


# ----- text ----------------------------------------------------------------------------
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
"""What no stored string may hold: NUL, a lone surrogate."""

CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\ud800-\udfff\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
"""What no name or label may hold, and what is never shown raw: C0 and C1
controls (ESC among them), DEL, lone surrogates, the line and paragraph
separators, and the bidirectional marks, embeddings, overrides and isolates."""


def text_problem(text: str, *, controls: bool = True) -> str | None:
    """What makes ``text`` unfit to store (``controls``: or to name or label
    something), as a phrase for a message (``a control character U+001B at 4``),
    else None."""
    found = (CONTROL if controls else _UNSTORABLE).search(text)
    if found is None:
        return None
    char = found.group()
    what = (
        "a NUL character"
        if char == "\x00"
        else "a lone surrogate"
        if "\ud800" <= char <= "\udfff"
        else "a control character"
    )
    return f"{what} U+{ord(char):04X} at {found.start()}"


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escaped(text: str) -> str:
    """``text`` with each ``CONTROL`` character written as its escape (``\\x1b``,
    ``\\u202e``, ``\\ud800``): safe to print on a terminal, and encodable."""
    return CONTROL.sub(_escape, text)
