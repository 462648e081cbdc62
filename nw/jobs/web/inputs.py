"""Reading a request's query and body: a wrong value is a 400 naming it.

Whatever a store or the facade would do with it, the HTTP layer refuses up
front what no caller means: a query or body that is not UTF-8, a NUL or a
lone surrogate in any query value or JSON string (PostgreSQL cannot store
one; it is never a label), JSON nested past ``MAX_JSON_DEPTH`` (a body
``json.loads`` or a later walk cannot handle without running out of stack),
and ``NaN``/``Infinity``, which are not JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from nw.jobs.web.errors import error

MAX_JSON_DEPTH = 64
"""How deeply a request's JSON may nest (a job's params are a few levels deep)."""
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _unstorable(text: str) -> str | None:
    """What in ``text`` no store takes (a NUL, a lone surrogate), or None."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    return "a NUL character" if found.group() == "\x00" else "a lone surrogate"


def query_problem(query_string: bytes) -> str | None:
    """Why the raw query string is refused (naming the parameter), or None."""
    text = query_string.decode("latin-1")
    for part in text.split("&"):
        if not part:
            continue
        raw_name, _, raw_value = part.partition("=")
        try:
            name = unquote_to_bytes(raw_name.replace("+", " ")).decode("utf-8")
        except UnicodeDecodeError:
            return f"a query parameter name is not UTF-8: {raw_name!r}"
        try:
            value = unquote_to_bytes(raw_value.replace("+", " ")).decode("utf-8")
        except UnicodeDecodeError:
            return f"query parameter {name!r} is not UTF-8"
        for what, field in ((f"query parameter {name!r}", value), ("a query parameter", name)):
            bad = _unstorable(field)
            if bad:
                return f"{what} has {bad}"
    return None


class QueryCheck:
    """Refuses (400) a request whose query has a value no route may read (see module)."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = query_problem(scope.get("query_string", b""))
            if problem:
                await error(400, problem)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def int_param(request: Request, name: str, default: int, *, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HTTPException(400, f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise HTTPException(400, f"{name} must be from {low} to {high}, got {value}")
    return value


async def body_text(request: Request) -> str:
    """The request body as text (400 when it is not UTF-8)."""
    try:
        return (await request.body()).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(400, f"the body is not UTF-8 (byte {exc.start})") from None


class _NotAJsonNumber(ValueError):
    pass


def _not_json(constant: str) -> Any:
    raise _NotAJsonNumber(f"{constant} is not a JSON number")


def json_value(text: str, what: str, *, checked: bool = True) -> Any:
    """``text`` parsed, or a 400 naming ``what`` and the problem (see module).
    ``checked=False`` leaves its depth and strings to the facade's door
    (``nw/jobs/core/checks.py``, for a job's fields: it names the field, in the
    words the Python API and the CLI use)."""
    try:
        value = json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError as exc:
        raise HTTPException(400, f"{what} is not valid JSON: {exc.msg}") from None
    except _NotAJsonNumber as exc:
        raise HTTPException(400, f"{what} is not valid JSON: {exc}") from None
    except ValueError:  # an integer past Python's 4,300-digit limit
        raise HTTPException(400, f"{what} holds a number too long to read") from None
    except RecursionError:
        raise HTTPException(400, f"{what} nests deeper than {MAX_JSON_DEPTH} levels") from None
    problem = _json_problem(value) if checked else None
    if problem:
        raise HTTPException(400, f"{what}{problem}")
    return value


def _json_problem(value: Any) -> str | None:
    """Too deep, or a string no store takes, anywhere in ``value`` (walked without recursion)."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth >= MAX_JSON_DEPTH:
                return f" nests deeper than {MAX_JSON_DEPTH} levels"
            if isinstance(node, dict):
                for key, item in node.items():
                    bad = _unstorable(key)
                    if bad:
                        return f": a key in {path or 'the top level'} has {bad}"
                    stack.append((item, f"{path}.{key}" if path else key, depth + 1))
            else:
                stack += [(item, f"{path}[{n}]", depth + 1) for n, item in enumerate(node)]
        elif isinstance(node, str):
            bad = _unstorable(node)
            if bad:
                return f": {path or 'the value'} has {bad}"
    return None


def json_object(text: str, what: str, *, checked: bool = True) -> dict[str, Any]:
    value = json_value(text, what, checked=checked)
    if not isinstance(value, dict):
        raise HTTPException(400, f"{what} must be a JSON object")
    return value


def json_array(text: str, what: str, *, checked: bool = True) -> list[Any]:
    value = json_value(text, what, checked=checked)
    if not isinstance(value, list):
        raise HTTPException(400, f"{what} must be a JSON array")
    return value
