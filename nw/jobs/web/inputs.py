"""Reading a request's query and body: a wrong value is a 400 naming it."""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request


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


def _loads(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise HTTPException(400, f"{what} is not valid JSON: {exc.msg}") from None
    except ValueError:  # an integer past Python's 4,300-digit limit
        raise HTTPException(400, f"{what} holds a number too long to read") from None
    except RecursionError:
        raise HTTPException(400, f"{what} is nested too deep to read") from None


def json_object(text: str, what: str) -> dict[str, Any]:
    value = _loads(text, what)
    if not isinstance(value, dict):
        raise HTTPException(400, f"{what} must be a JSON object")
    return value


def json_array(text: str, what: str) -> list[Any]:
    value = _loads(text, what)
    if not isinstance(value, list):
        raise HTTPException(400, f"{what} must be a JSON array")
    return value
