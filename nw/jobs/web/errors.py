"""How the API answers an exception: by its type, never by a built-in base.

Every error is ``{"error": message}``. The caller's mistakes
(``nw.errors.InvalidInput``, and Starlette's ``HTTPException``) are 4xx with
their message; ``BudgetExceeded`` is 402 and says whether an approval would
do; a failing store is a generic 503 and a broken setup a generic 500, their
detail (which may name the database's user, host and name, or carry SQL
context) in one line of the server's log only, control characters escaped.
Anything else is a bug: a bare 500, and Starlette re-raises it after
answering so the server logs the traceback. A ``KeyError`` or
``ValueError`` from inside nw is one of those bugs, not the caller's fault.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from nw.errors import BudgetExceeded, ConfigError, InvalidInput, JobStoreError
from nw.jobs.web.responses import JSONResponse

log = logging.getLogger("nw.jobs.web")
INTERNAL_ERROR = "internal error; see the server log"
STORE_UNAVAILABLE = "the job store is unavailable; see the server log"
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def loggable(text: object) -> str:
    """``text`` on one line with its control characters escaped: a request's
    path or a driver's message cannot move the operator's terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))


def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def on_http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error(exc.status_code, str(exc.detail), headers=exc.headers)


async def on_invalid_input(request: Request, exc: Exception) -> Response:
    return error(400, str(exc) or type(exc).__name__)


async def on_budget_exceeded(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, BudgetExceeded)  # the cost gate said no; nothing was written
    body = {"error": str(exc), "needs_approval": exc.needs_approval}
    body["budget"] = getattr(exc, "budget", None)  # the stored budget that refused, if one
    return JSONResponse(body, status_code=402)


async def on_store_error(request: Request, exc: Exception) -> Response:
    # The detail names the store (a database URL: user, host, name) and may
    # quote SQL: the operator reads it in the log, the client never does.
    log.warning("%s %s: %s", request.method, loggable(request.url.path), loggable(exc))
    return error(503, STORE_UNAVAILABLE)


async def on_config_error(request: Request, exc: Exception) -> Response:
    # The operator's to fix, not the client's to read: the detail goes to the log.
    path, detail = loggable(request.url.path), loggable(exc)
    log.error("%s %s: the server is misconfigured: %s", request.method, path, detail)
    return error(500, "the server is misconfigured; see the server log")


async def on_bug(request: Request, exc: Exception) -> Response:
    return error(500, INTERNAL_ERROR)


HANDLERS: dict[Any, Callable[[Request, Exception], Any]] = {
    HTTPException: on_http_exception,
    InvalidInput: on_invalid_input,
    BudgetExceeded: on_budget_exceeded,
    JobStoreError: on_store_error,
    ConfigError: on_config_error,
    Exception: on_bug,  # Starlette answers with it, then re-raises for the server's log
}
"""Matched by the exception's class, most specific first (Starlette walks the MRO)."""
