"""Each store's SQL, as named queries in a ``.sql`` file beside this module.

A file is a sequence of blocks, each opened by a ``-- name: <query>`` line and
a few ``--`` lines saying what the query is for, then one statement (pasteable
into ``psql`` or ``sqlite3`` as written; parameters are named: ``%(job_id)s``
for psycopg, ``:job_id`` for sqlite3). Comment lines are dropped when loading
(a ``%`` in a comment would otherwise read as a psycopg placeholder), and so
is each line's indentation: psycopg caches the parse of a statement only up to
``MAX_STATEMENT_CHARS``, and re-parsing a longer one cost a worker 0.1 ms per
job. Files are read once per process.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib import resources
from types import MappingProxyType

#: psycopg parses a query's placeholders once per process only when the query
#: is at most this long (``psycopg._queries.MAX_CACHED_STATEMENT_LENGTH``).
MAX_STATEMENT_CHARS = 4096
_HEADER = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    """``{name: statement}`` of a queries file (comments and the final ``;`` dropped)."""
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [ln.strip() for ln in body.splitlines() if not ln.lstrip().startswith("--")]
        statement = "\n".join(lines).strip().rstrip(";").strip()
        if not statement:
            raise ValueError(f"query {name!r} has no statement")
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = statement
    return queries


@functools.cache
def load_queries(filename: str) -> Mapping[str, str]:
    """The named queries of ``filename`` in this package (read once)."""
    text = resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")
    return MappingProxyType(parse_queries(text))
