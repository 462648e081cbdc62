"""How ``create_many`` sends a batch of new jobs to PostgreSQL: one JSON array
of rows (one parameter however many jobs), and the document fields every row
of the batch has alike sent once beside it (``shared``), each row's document
carrying only its own. The statement puts them back together
(``shared || doc``: the same ``jsonb`` as the whole document). A batch of
plain jobs shares most of its document (label, runner, the ETA prediction,
the retry policy, ...): sending it once made the parameter about half as
long, and the server's parse of it and the client's encoding with it
(misc/bench/PERFORMANCE.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nw.jobs.stores.base import due_at
from nw.jobs.stores.columns import row_values

_SCALARS = (str, int, bool, type(None))
"""Values equal only when their JSON is equal (``1 == True`` has the type too)."""
_MISSING = object()


def batch_rows(
    records: Sequence[Mapping[str, Any]], claimable: Sequence[bool], ks: Sequence[int]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(the rows of ``records[k]`` for each k of ``ks``, the document fields
    they share). A row is a new record's columns, its own document fields
    (``doc``), its ``queue_at`` (None: not claimable) and ``n``, its place in
    the batch (which orders its actor's turns)."""
    rows = []
    for k in ks:
        cols, doc = row_values(records[k])
        cols["doc"] = doc
        cols["queue_at"] = due_at(records[k]) if claimable[k] else None
        cols["n"] = k
        rows.append(cols)
    shared = shared_fields([row["doc"] for row in rows])
    if shared:
        for row in rows:
            row["doc"] = {f: v for f, v in row["doc"].items() if f not in shared}
    return rows, shared


def shared_fields(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fields every one of ``docs`` has with the same JSON value: the same
    object, or a scalar of the same type and value (a float also by its
    ``repr``: ``0.0 == -0.0``). Nothing for a batch of one."""
    if len(docs) < 2:
        return {}
    rest = docs[1:]
    shared = {}
    for field, value in docs[0].items():
        # the same object in most rows of a batch: the cheap test first
        if all(doc.get(field, _MISSING) is value for doc in rest) or all(
            _same_json(value, doc.get(field, _MISSING)) for doc in rest
        ):
            shared[field] = value
    return shared


def _same_json(value: Any, other: Any) -> bool:
    """Two values that would be stored alike."""
    if other is value:
        return True
    kind = type(value)
    if type(other) is not kind or other != value:
        return False
    return kind in _SCALARS or (kind is float and repr(other) == repr(value))
