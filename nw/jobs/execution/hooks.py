"""Webhook URLs for parked jobs: signed for one job and attempt, checked on arrival.

A body that declares ``webhook_url`` gets
``<public base>/hooks/<job_id>/<attempt>/<signature>`` before it submits, so
a webhook that arrives before the park is recorded is already valid (the
store keeps it for the park). The public base is ``--public-url`` of
``nw-jobs serve`` or ``NW_JOBS_PUBLIC_URL``; without one a body gets None
(and its job is resumed by polls). The signature is an HMAC-SHA256 of the
job id and attempt under the project's webhook secret:
``NW_JOBS_WEBHOOK_SECRET``, else ``<project>/.nw/webhook_secret``, made on
first need (mode 0600) so every process of the project signs alike.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import quote

from nw.project import as_project

log = logging.getLogger("nw.jobs")

PUBLIC_URL_ENV = "NW_JOBS_PUBLIC_URL"
SECRET_ENV = "NW_JOBS_WEBHOOK_SECRET"
SECRET_FILE = "webhook_secret"
ROUTE = "/hooks"


def _root(project: Any) -> Path:
    """The project's folder (a ``Project``, or a path to one)."""
    return as_project(project).root


def secret(project: Any) -> bytes:
    """The project's webhook secret (the environment's, else its file's, made once)."""
    env = os.environ.get(SECRET_ENV)
    if env:
        return env.encode("utf-8")
    path = _root(project) / ".nw" / SECRET_FILE
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    made = secrets.token_hex(32).encode("ascii")
    try:  # O_EXCL: two processes making it at once agree on the first one's
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_bytes().strip()
    with os.fdopen(fd, "wb") as f:
        f.write(made)
    return made


def signature(project: Any, job_id: str, attempt: int) -> str:
    message = f"{job_id}\n{int(attempt)}".encode()
    return hmac.new(secret(project), message, hashlib.sha256).hexdigest()


def verify(project: Any, job_id: str, attempt: int, given: str) -> bool:
    return hmac.compare_digest(signature(project, job_id, attempt), given)


def public_base(explicit: str | None = None) -> str | None:
    base = explicit or os.environ.get(PUBLIC_URL_ENV)
    return base.rstrip("/") if base else None


def url_for(project: Any, job_id: str, attempt: int, base: str | None = None) -> str | None:
    """The signed URL a provider posts the job's webhook to (None: no public base set)."""
    found = public_base(base)
    if found is None:
        return None
    try:
        sig = signature(project, job_id, attempt)
    except OSError as exc:  # no secret to sign with (a read-only project): polls resume it
        log.warning("no webhook URL for job %s: its secret cannot be read or made (%s)",
                    job_id, type(exc).__name__)  # fmt: skip
        return None
    return f"{found}{ROUTE}/{quote(job_id, safe='')}/{int(attempt)}/{sig}"
