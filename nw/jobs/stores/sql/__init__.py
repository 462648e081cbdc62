"""Each store's SQL, as named queries in a ``.sql`` file beside this module.

A file is a sequence of blocks, each opened by a ``-- name: <query>`` line and
a few ``--`` lines saying what the query is for, then one statement (pasteable
into ``psql`` or ``sqlite3`` as written; parameters are named: ``%(job_id)s``
for psycopg, ``:job_id`` for sqlite3). Comment lines are dropped when loading
(a ``%`` in a comment would otherwise read as a psycopg placeholder), and so
is each line's indentation: psycopg caches the parse of a statement only up to
``MAX_STATEMENT_CHARS``, and re-parsing a longer one cost a worker 0.1 ms per
job. Files are read once per process.

A rule several statements share is written once, as a ``-- fragment: <name>``
block, and placed with ``{{name}}`` (in a query or another fragment): the
columns a job row is read with, the grade of a job, the filters of a page.
A fragment is text, not a query: it is not returned, and a reference to an
unknown one (or a fragment that includes itself) refuses the whole file.
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
_HEADER = re.compile(r"^-- (name|fragment): ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{\{([a-z][a-z0-9_]*)\}\}")


def parse_queries(text: str) -> dict[str, str]:
    """``{name: statement}`` of a queries file (comments and the final ``;``
    dropped, fragments placed)."""
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    fragments: dict[str, str] = {}
    for what, name, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        lines = [ln.strip() for ln in body.splitlines() if not ln.lstrip().startswith("--")]
        statement = "\n".join(lines).strip().rstrip(";").strip()
        if not statement:
            raise ValueError(f"{'query' if what == 'name' else what} {name!r} has no statement")
        if name in queries or name in fragments:
            raise ValueError(f"query {name!r} is defined twice")
        (queries if what == "name" else fragments)[name] = statement
    return {name: _placed(sql, fragments, ()) for name, sql in queries.items()}


def _placed(sql: str, fragments: Mapping[str, str], within: tuple[str, ...]) -> str:
    """``sql`` with each ``{{fragment}}`` replaced by its text (recursively)."""

    def place(match: re.Match[str]) -> str:
        name = match[1]
        if name not in fragments:
            raise ValueError(f"no fragment {name!r} (named in {within[-1:] or 'a query'})")
        if name in within:
            raise ValueError(f"fragment {name!r} includes itself")
        return _placed(fragments[name], fragments, (*within, name))

    return _INCLUDE.sub(place, sql)


@functools.cache
def load_queries(filename: str) -> Mapping[str, str]:
    """The named queries of ``filename`` in this package (read once)."""
    text = resources.files(__package__).joinpath(filename).read_text(encoding="utf-8")
    return MappingProxyType(parse_queries(text))
