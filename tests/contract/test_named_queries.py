"""Each store's SQL file: parsed by name, and every statement valid as written."""

from __future__ import annotations

import re

import pytest

from nw.jobs.stores.sql import MAX_STATEMENT_CHARS, load_queries, parse_queries

_PSYCOPG_PARAM = re.compile(r"%\((\w+)\)s")
QUERIES_OF = {
    "SqliteJobStore": ("sqlite_queries.sql", "sqlite_parked.sql", "sqlite_pipelines.sql"),
    "PostgresJobStore": ("postgres_queries.sql", "postgres_parked.sql", "postgres_pipelines.sql"),
}


def test_a_queries_file_is_read_by_name_without_its_comments():
    text = (
        "-- a file comment\n"
        "-- name: one\n-- what it is for (100% of the time)\nSELECT 1;\n\n"
        "-- name: two\nSELECT :x\n  -- an inner note\n  FROM t;\n"
    )
    assert parse_queries(text) == {"one": "SELECT 1", "two": "SELECT :x\nFROM t"}
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
    with pytest.raises(ValueError, match="has no statement"):
        parse_queries("-- name: a\n-- only a comment\n")


def test_a_fragment_is_written_once_and_placed_where_named():
    text = (
        "-- fragment: cols\n-- the columns\nj.a, j.b\n\n"
        "-- fragment: where\nj.a = :a AND {{tail}}\n"
        "-- fragment: tail\nj.b > 0\n"
        "-- name: one\nSELECT {{cols}} FROM j WHERE {{where}};\n"
        "-- name: two\nSELECT {{cols}} FROM j;\n"
    )
    assert parse_queries(text) == {
        "one": "SELECT j.a, j.b FROM j WHERE j.a = :a AND j.b > 0",
        "two": "SELECT j.a, j.b FROM j",
    }
    with pytest.raises(ValueError, match="no fragment 'nope'"):
        parse_queries("-- name: a\nSELECT {{nope}};\n")
    with pytest.raises(ValueError, match="includes itself"):
        parse_queries("-- fragment: f\nx {{f}}\n-- name: a\nSELECT {{f}};\n")
    with pytest.raises(ValueError, match="defined twice"):
        parse_queries("-- fragment: a\nx\n-- name: a\nSELECT 1;\n")


def test_every_statement_of_the_store_compiles_against_its_schema(store):
    # Given the store's own queries file, as the store loads it
    files = QUERIES_OF[type(store).__name__]
    queries = {f"{n}_{i}": q for i, f in enumerate(files) for n, q in load_queries(f).items()}
    assert all(load_queries(f) for f in files)
    if type(store).__name__ == "SqliteJobStore":
        # Then sqlite3 compiles each one as written (:name parameters unbound)
        for sql in queries.values():
            store._conn.execute(f"EXPLAIN {sql}", dict.fromkeys(re.findall(r":(\w+)", sql)))
        return
    # Then PostgreSQL prepares each one as written (%(name)s as $n), types inferred
    import psycopg

    with psycopg.connect(store.db.url, autocommit=True) as conn:
        for name, sql in queries.items():
            order: list[str] = []

            def number(match: re.Match, order: list[str] = order) -> str:
                if match[1] not in order:
                    order.append(match[1])
                return f"${order.index(match[1]) + 1}"

            positional = _PSYCOPG_PARAM.sub(number, sql)
            conn.execute(f"PREPARE nw_check_{name} AS {positional}")
            conn.execute(f"DEALLOCATE nw_check_{name}")


def test_every_postgres_statement_fits_psycopgs_parse_cache():
    # psycopg converts %(name)s placeholders once per process only for a query
    # of at most this many characters; a longer one is re-parsed at every call
    # (0.1 ms of a worker's CPU per job for the finish-and-claim statement).
    from psycopg import _queries

    assert MAX_STATEMENT_CHARS == _queries.MAX_CACHED_STATEMENT_LENGTH
    long = {
        name: len(sql)
        for file in QUERIES_OF["PostgresJobStore"]
        for name, sql in load_queries(file).items()
        if len(sql) > MAX_STATEMENT_CHARS
    }
    assert not long, f"over {MAX_STATEMENT_CHARS} characters: {long}"


def _fragment(filename: str, name: str) -> str:
    from importlib import resources

    text = resources.files("nw.jobs.stores.sql").joinpath(filename).read_text(encoding="utf-8")
    body = text.split(f"-- fragment: {name}\n", 1)[1].split("\n\n", 1)[0]
    return "\n".join(ln for ln in body.splitlines() if not ln.startswith("--"))


@pytest.mark.parametrize("filename", ["sqlite_queries.sql", "postgres_queries.sql"])
def test_a_job_is_read_with_the_declared_columns(filename):
    # The SQL names the columns; stores/columns.py declares them: the two agree
    # (a column added to one and not the other fails here, not in a read).
    from nw.jobs.stores.columns import COLUMNS

    read = re.findall(r"j\.(\w+)", _fragment(filename, "job_columns"))
    assert read[: read.index("doc")] == list(COLUMNS)


def test_a_postgres_patch_sets_every_declared_column_it_may():
    from nw.jobs.stores.columns import DECLARED

    sets = re.findall(
        r"(\w+) = CASE WHEN p\.c \? '(\w+)'", _fragment("postgres_queries.sql", "patch_columns")
    )
    assert all(column == key for column, key in sets)
    patched = [c.name for c in DECLARED if c.patch != "never" and "postgres" in c.engines]
    assert sorted(column for column, _ in sets) == sorted(patched)
