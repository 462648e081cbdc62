"""Passwords stay out of logs: the filter is installed when a database is opened."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("psycopg")


def test_importing_the_store_installs_no_log_filter_and_opening_a_database_does():
    # In a fresh interpreter: import the PostgreSQL store, then open a Database
    # (parsing its URL connects to nothing)
    code = (
        "import logging\n"
        "import nw.jobs.stores.postgres\n"
        "from nw.jobs.stores.pg_database import Database\n"
        "print(len(logging.getLogger('psycopg').filters))\n"
        "Database('postgresql://u:hunter2@db.example:5432/jobs')\n"
        "print(len(logging.getLogger('psycopg').filters))\n"
        "Database('postgresql://u:hunter2@db.example:5432/jobs')\n"
        "print(len(logging.getLogger('psycopg').filters))\n"
        "logging.getLogger('psycopg').filters[0].filter(r := logging.LogRecord("
        "'psycopg', 30, '', 0, 'lost %s', ('postgresql://u:hunter2@db.example/jobs',), None))\n"
        "print(r.getMessage())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after, again, message = out.stdout.splitlines()
    assert (before, after, again) == ("0", "1", "1")  # none on import; one, once, on open
    assert "hunter2" not in message and "db.example" in message
