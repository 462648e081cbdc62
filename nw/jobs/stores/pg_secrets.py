"""Database URLs without their passwords: in errors, in ``repr``, in log records.

A URL may carry a password. ``display`` shows it as
``postgresql://user@host:port/db``; ``scrub`` removes every password this
process has seen (and any URL or keyword password) from a text; the log
filter does the same for the records of the ``psycopg`` loggers (a pool's
reconnect warning quotes its connection string). The filter is installed by
``install_log_filter`` when a database is first opened, never on import.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import Any
from urllib.parse import quote

_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]*:)[^@\s]*@")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_LOGGERS = ("psycopg", "psycopg.pool", "nw.jobs")

_SECRETS: set[str] = set()
_LOCK = threading.Lock()


def register_secret(secret: str) -> None:
    """Remember a password (and its URL-quoted forms) so ``scrub`` removes it."""
    if secret:
        with _LOCK:
            _SECRETS.update({secret, quote(secret, safe=""), quote(secret)})


def scrub(text: str) -> str:
    """``text`` without any known password (and without URL/keyword passwords)."""
    with _LOCK:
        known = sorted(_SECRETS, key=len, reverse=True)
    for secret in known:
        text = text.replace(secret, "***")
    text = _URL_PASSWORD.sub(r"\1***@", text)
    return _KV_PASSWORD.sub(r"\1***", text)


def display(params: dict[str, Any]) -> str:
    """``postgresql://user@host:port/db`` of parsed connection parameters."""
    user = params.get("user") or ""
    host = params.get("host") or params.get("hostaddr") or "localhost"
    port = params.get("port") or "5432"
    db = params.get("dbname") or user
    return f"postgresql://{user + '@' if user else ''}{host}:{port}/{db}"


class ScrubFilter(logging.Filter):
    """Drops passwords from log records (e.g. the pool's reconnect warnings)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


_FILTER = ScrubFilter()


def install_log_filter() -> None:
    """Scrub the records of psycopg's and nw.jobs' loggers (idempotent)."""
    for name in _LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
