"""A job's stored columns, each declared once.

A job record is a dict; a store keeps some of its fields as real columns
(what is filtered, ordered or fenced) and the rest in one JSON document
(``doc``). Each column is declared here: its name, its Python type, where its
value comes from (the record field of that name, or derived from the record,
as ``actor_id`` from ``actor``) and how a patch treats it. ``COLUMNS``, a
new row's values (``row_values``) and a patch's (``patch_values``) all derive
from this list, so both engines build rows one way; the engines' SQL names
the columns, and a migration adds one (see "Adding a column" in
``misc/ARCHITECTURE.md``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@functools.lru_cache(maxsize=1024)
def is_field_name(name: Hashable) -> bool:
    """A record field name a store accepts in a patch: an identifier (a doc
    key and a column name alike). Cached: every finish checks each of its
    fields' names."""
    return isinstance(name, str) and _FIELD_NAME.fullmatch(name) is not None


def actor_id_of(record: Mapping[str, Any]) -> str | None:
    """The id of the record's actor (``actor["id"]``), or None."""
    actor = record.get("actor")
    return str(actor["id"]) if isinstance(actor, Mapping) and actor.get("id") else None


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int_or_zero(value: Any) -> int:
    return int(value or 0)


@dataclass(frozen=True)
class Column:
    """One stored column of a job."""

    name: str
    type: type
    #: Read back into the record (a record field of this name); False for a
    #: column derived from other fields, which the record keeps in its doc.
    in_record: bool = True
    #: How the value is made from a record; None: the record's field as it is.
    derive: Callable[[Mapping[str, Any]], Any] | None = None
    #: The record field whose presence in a patch sets a derived column.
    patched_by: str | None = None
    #: How a patch sets it: "flag" (the patch statement's set flag), "alone"
    #: (a statement of its own on SQLite: an indexed column), or "never".
    patch: Literal["flag", "alone", "never"] = "flag"
    #: The engines that store it ("sqlite", "postgres").
    engines: frozenset[str] = frozenset({"sqlite", "postgres"})

    def value(self, record: Mapping[str, Any]) -> Any:
        if self.derive is not None:
            return self.derive(record)
        raw = record.get(self.name)
        if self.type is bool:
            return bool(raw)
        if self.type is int:
            return _int_or_zero(raw)
        return raw


#: Every stored column of a job, in the order the stores declare them.
DECLARED: tuple[Column, ...] = (
    Column("job_id", str, patch="never"),
    Column("created_at", float, patch="alone"),
    Column("kind", str),
    Column("attempt", int),
    Column("cancel_requested", bool),
    Column("started_at", float),
    Column("finished_at", float, patch="alone"),
    Column("heartbeat_at", float),
    Column("runner_id", str),
    Column("actor_id", str, in_record=False, derive=actor_id_of, patched_by="actor", patch="alone"),
    Column(
        "idempotency_key",
        str,
        in_record=False,
        derive=lambda r: _text_or_none(r.get("idempotency_key")),
        patched_by="idempotency_key",
        patch="alone",
        engines=frozenset({"postgres"}),  # SQLite dedups by the job id alone
    ),
    Column("limit_key", str, in_record=False, derive=lambda r: r.get("limit_key"), patch="never"),
    Column(
        "priority",
        int,
        in_record=False,
        derive=lambda r: _int_or_zero(r.get("priority")),
        patch="never",
    ),
)

#: The record fields every backend keeps as real columns (filtered, ordered, fenced).
COLUMNS: tuple[str, ...] = tuple(c.name for c in DECLARED if c.in_record)
_IN_COLUMNS = frozenset(COLUMNS)
#: The record columns a patch sets by the patch statement's flags.
PATCHED_BY_FLAG: tuple[str, ...] = tuple(c.name for c in DECLARED if c.patch == "flag")


#: The columns a patch sets by a statement of their own, by engine (SQLite's
#: indexed columns; PostgreSQL sets every column in its one patch statement).
def patched_alone(engine: str) -> tuple[str, ...]:
    return tuple(c.name for c in DECLARED if c.patch == "alone" and engine in c.engines)


def row_values(record: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(every column's value, derived ones included; the doc fields) of a whole
    record: what ``create``, ``create_many`` and ``put_record`` write."""
    cols = {c.name: c.value(record) for c in DECLARED}
    doc = {k: v for k, v in record.items() if k not in _IN_COLUMNS}
    return cols, doc


def patch_values(fields: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the columns a patch of these fields sets, the doc fields it sets);
    ``ValueError`` for a name that is not a record field name. ``job_id`` is
    never patched; a derived column is set when its source field is."""
    cols: dict[str, Any] = {}
    doc: dict[str, Any] = {}
    for name, value in fields.items():
        if not is_field_name(name):
            raise ValueError(f"not a record field name: {name!r}")
        if name == "job_id":
            continue
        if name in COLUMNS:
            cols[name] = bool(value) if name == "cancel_requested" else value
        else:
            doc[name] = value
    for c in DECLARED:
        if c.patched_by is not None and c.patched_by in fields:
            cols[c.name] = c.value(fields)
    return cols, doc
