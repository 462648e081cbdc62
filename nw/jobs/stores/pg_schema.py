"""The PostgreSQL schema: versioned migrations, and the check a store makes on open.

``migrate(url)`` applies the numbered files of ``pg_migrations/`` in order,
each in its own transaction, under a transaction-scoped advisory lock: two
hosts migrating at once serialise and the second finds nothing to do. It is
the only code that creates anything. ``check_schema`` refuses a database at
another version than this code's (never migrated, behind, or newer).
"""

from __future__ import annotations

import logging
import re
import threading
from importlib import resources

import psycopg
from psycopg import sql

from nw.jobs.core.errors import JobStoreError
from nw.jobs.stores.pg_database import Conn, Database

log = logging.getLogger("nw.jobs")

SCHEMA = "nw_jobs"
MIGRATIONS_PACKAGE = "nw.jobs.stores.pg_migrations"
#: Transaction-scoped advisory lock key of ``migrate`` ("nwjobs" in ASCII).
MIGRATE_LOCK = 0x6E776A6F6273

_CHECKED: set[str] = set()  # URLs seen at the latest schema version by this process
_CHECKED_LOCK = threading.Lock()


def migration_files() -> list[tuple[int, str, str]]:
    """(version, name, sql) of every shipped migration, in order."""
    out = []
    for entry in resources.files(MIGRATIONS_PACKAGE).iterdir():
        match = re.fullmatch(r"(\d{4})_(\w+)\.sql", entry.name)
        if match:
            out.append((int(match[1]), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(out)


LATEST_VERSION = max(v for v, _, _ in migration_files())


def _schema_version(conn: Conn, _retried: bool) -> int:
    found = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL AS found", (f"{SCHEMA}.schema_migrations",)
    ).fetchone()
    if not found or not found["found"]:
        return 0
    # The version the schema is at: the last of an unbroken run from 1. Migrations
    # were numbered by the branches that wrote them, so a database may have 3 and
    # not 2 (it was migrated by a release without 2): it is at 1 until 2 is applied.
    rows = conn.execute(f"SELECT version FROM {SCHEMA}.schema_migrations").fetchall()
    applied = {int(r["version"]) for r in rows}
    if max(applied, default=0) > LATEST_VERSION:
        return max(applied)  # a newer release migrated it: refused as newer
    version = 0
    while version + 1 in applied:
        version += 1
    return version


def check_schema(db: Database) -> int:
    """The schema version, or ``JobStoreError`` when it is not the one this code
    speaks. Nothing is created here: only ``migrate`` changes the schema."""
    with _CHECKED_LOCK:
        if db.url in _CHECKED:
            return LATEST_VERSION
    version = db.run(_schema_version, what="reading the schema version")
    if version == LATEST_VERSION:
        with _CHECKED_LOCK:
            _CHECKED.add(db.url)
        return version
    if version > LATEST_VERSION:
        raise JobStoreError(
            f"job store {db.display} has schema version {version}, newer than this "
            f"nw-jobs understands ({LATEST_VERSION}); upgrade nw-jobs"
        )
    state = "is not set up" if version == 0 else f"is at schema version {version}"
    raise JobStoreError(
        f"job store {db.display} {state} (this nw-jobs needs {LATEST_VERSION}); "
        "run `nw-jobs db migrate` against it first"
    )


def forget_checks() -> None:
    """Check every database again on next open (tests drop and re-create them)."""
    with _CHECKED_LOCK:
        _CHECKED.clear()


def migrate(url: str) -> list[str]:
    """Create or upgrade the schema; returns the names of the migrations applied.

    Idempotent and safe from two hosts at once (a transaction-scoped advisory
    lock serialises them; the second finds nothing left to do). Each
    migration and its bookkeeping row commit together.
    """
    db = Database(url)
    applied: list[str] = []
    try:
        with psycopg.connect(url, application_name="nw-jobs migrate") as conn:
            for version, name, text in migration_files():
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
                    conn.execute(
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA))
                    )
                    conn.execute(
                        f"CREATE TABLE IF NOT EXISTS {SCHEMA}.schema_migrations ("
                        " version integer PRIMARY KEY, name text NOT NULL,"
                        " applied_at timestamptz NOT NULL DEFAULT now())"
                    )
                    done = conn.execute(
                        f"SELECT 1 FROM {SCHEMA}.schema_migrations WHERE version = %s",
                        (version,),
                    ).fetchone()
                    if done:
                        continue
                    conn.execute(text)  # no parameters: the file may hold many statements
                    conn.execute(
                        f"INSERT INTO {SCHEMA}.schema_migrations (version, name) VALUES (%s, %s)",
                        (version, name),
                    )
                    applied.append(name)
    except psycopg.Error as exc:
        raise db.error("migration failed", exc) from None
    for name in applied:
        log.info("job store %s: applied migration %s", db.display, name)
    return applied
