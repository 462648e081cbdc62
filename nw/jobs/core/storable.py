"""What a store cannot keep as given, and the one rule for it (pure).

Two characters a Python string may hold have no place in a store:

* NUL (U+0000): PostgreSQL's ``jsonb`` refuses ``\\u0000`` ("unsupported
  Unicode escape sequence") and its ``text`` refuses the byte;
* a lone surrogate (U+D800..U+DFFF, unpaired): it has no UTF-8 form, so
  ``jsonb`` refuses it and SQLite's text columns cannot be written with it.

A body's result or error that carried one made the finish of a paid attempt
fail on one store and not the other. One rule, the same on both stores, at the
boundary (every store write of what a body said: a finish, a requeue, a patch,
a progress beat): each such character is replaced by U+FFFD (the Unicode
replacement character), in values and in mapping keys, at any depth. A finish
or a requeue records which parts had any in the record's ``text_replaced``
(``"result"``, ``"error"`` or a record field's name, sorted), so a replaced
result is told from one the body returned so.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

REPLACEMENT = "\ufffd"
"""What each character no store keeps is replaced by."""

REPLACED_FIELD = "text_replaced"
"""The record field that lists the parts of a finish or requeue whose text was replaced."""

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
# In ``json.dumps``'s ASCII form NUL is ``\u0000`` and every surrogate (lone,
# or half of a pair the encoder wrote for a character past U+FFFF) starts
# ``\ud``: a value whose form has neither needs no walk (the common case, at
# the encoder's speed). A match is only a hint; the walk decides.
_HINTS = ("\\u0000", "\\ud")


def storable_text(text: str) -> str:
    """``text`` with every NUL and lone surrogate replaced by U+FFFD."""
    return _UNSTORABLE.sub(REPLACEMENT, text)


def storable(value: Any) -> tuple[Any, bool]:
    """``(value as a store keeps it, whether anything was replaced)``; the
    value itself when nothing was (no copy)."""
    if value is None or type(value) in (bool, int, float):
        return value, False
    if type(value) is str:
        if _UNSTORABLE.search(value) is None:
            return value, False
        return storable_text(value), True
    try:
        form = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        form = None  # not JSON as it stands: let the walk (and then the store) judge
    if form is not None and clean_form(form):
        return value, False
    try:
        return (_walk(value), True) if _differs(value) else (value, False)
    except RecursionError:  # deeper than Python recurses: the store judges it as it is
        return value, False


def clean_form(form: str) -> bool:
    """Whether a value whose ``json.dumps`` form (ASCII, the default) is
    ``form`` holds nothing to replace, at any depth: then ``storable`` keeps
    it as it is, and a store may skip asking it part by part."""
    return not any(hint in form for hint in _HINTS)


def _differs(value: Any) -> bool:
    """Whether ``value`` holds a character to replace, in a value or a key."""
    if isinstance(value, str):
        return _UNSTORABLE.search(value) is not None
    if isinstance(value, Mapping):
        return any(_differs(k) or _differs(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_differs(v) for v in value)
    return False


def _walk(value: Any) -> Any:
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, Mapping):
        return {(_walk(k) if isinstance(k, str) else k): _walk(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_walk(v) for v in value]
    return value


def storable_fields(fields: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Record fields as a store keeps them, and the names of those that changed."""
    out: dict[str, Any] = {}
    replaced: list[str] = []
    for name, value in fields.items():
        kept, changed = storable(value)
        out[name] = kept
        if changed:
            replaced.append(name)
    return out, replaced


def storable_finish(
    result: Any, error: str | None, fields: Mapping[str, Any]
) -> tuple[Any, str | None, dict[str, Any], list[str]]:
    """A finish's (or a requeue's) result, status error and record fields as
    a store keeps them, and what was replaced; when anything was, the fields
    carry ``text_replaced`` (sorted part names)."""
    result, in_result = storable(result)
    in_error = False
    if isinstance(error, str):
        error, in_error = storable(error)
    kept, names = storable_fields(fields)
    parts = set(names)
    if in_result:
        parts.add("result")
    if in_error:
        parts.add("error")
    if parts:
        kept[REPLACED_FIELD] = sorted(parts)
    return result, error, kept, sorted(parts)
