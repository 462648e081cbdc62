"""What every subcommand shares: exit statuses, the project and job-id
resolution, one-line user errors, output helpers and argument values
(ages, ``--since``, ``--params``, ``--import``, a JSON file)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from nw.errors import InvalidInput

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2


EXIT_FAILED, EXIT_CANCELLED = 3, 4


EXIT_TIMEOUT, EXIT_INTERRUPTED = 124, 130


WATCH_EXIT = {"succeeded": EXIT_OK, "failed": EXIT_FAILED, "cancelled": EXIT_CANCELLED}


PROJECT_ENV = "NW_JOBS_PROJECT"


TOKEN_ENV = "NW_JOBS_TOKEN"


DEBUG_ENV = "NW_JOBS_DEBUG"


class UserError(InvalidInput):
    """A mistake the person can fix that only the command line sees (an
    ambiguous id prefix, a missing option); printed as one line."""


def make_console(*, stderr: bool = False):
    """A rich console that shows what it is given as text: no markup, no emoji
    codes, no highlighting, and a string's control characters escaped (a
    renderable from ``nw.cli.render`` escapes its own)."""
    from rich.console import Console

    from nw.cli.render import text

    class TextConsole(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            shown = [text(o) if isinstance(o, str) else o for o in objects]
            super().print(*shown, **kwargs)

    return TextConsole(stderr=stderr, highlight=False, markup=False, emoji=False)


def print_json(value: Any) -> None:
    from nw.cli.render import shown_json

    sys.stdout.write(shown_json(value) + "\n")


def project_from(args: argparse.Namespace):
    root = args.project or os.environ.get(PROJECT_ENV) or os.getcwd()
    return _existing(root)


def projects_from(args: argparse.Namespace) -> list:
    roots = args.project or [os.environ.get(PROJECT_ENV) or os.getcwd()]
    return [_existing(root) for root in roots]


def _existing(root: str):
    """The project at ``root``; a folder that is not one (a typo in --project)
    is one line, not a new empty project made silently. ``nw-jobs init`` makes one."""
    from nw import Project
    from nw.project import META_FILE

    project = Project(root)
    if not (project.meta_dir / META_FILE).is_file():
        raise UserError(
            f"{project.root} is not an nw-jobs project (no .nw/{META_FILE}):"
            f" check --project, or make one with nw-jobs init {project.root}"
        )
    return project


def resolve_id(project, text: str) -> str:
    """A full job id, or a unique prefix of one (``list`` shows 12 characters)."""
    from nw.jobs import DEFAULT_CONFIG
    from nw.jobs.core.ids import is_job_id
    from nw.jobs.stores import open_store

    text = text.strip().lower()
    if is_job_id(text):
        return text
    if not (4 <= len(text) < 64 and all(c in "0123456789abcdef" for c in text)):
        raise UserError(
            f"{text!r} is not a job id: give the 64 hex characters `nw-jobs list` shows"
            " the start of, or a unique prefix of at least 4 of them"
        )
    store = open_store(project, DEFAULT_CONFIG, create=False)
    if store is None:
        raise UserError(f"no job {text!r} in {project.root} (it has no jobs)")
    try:
        matches = [job_id for job_id in store.index if job_id.startswith(text)]
    finally:
        store.close()
    if not matches:
        raise UserError(f"no job {text!r} in {project.root}")
    if len(matches) > 1:
        raise UserError(f"job id prefix {text!r} is ambiguous ({len(matches)} jobs); give more")
    return matches[0]


def job_dict(job) -> dict[str, Any]:
    from nw.jobs import to_dict

    return to_dict(job)


def one_job(project, job_id: str, call: Callable[..., Any]) -> dict[str, Any]:
    """``call(project, job_id)`` (get or cancel) as a dict; a missing job is a user error."""
    job = call(project, job_id)
    if job is None:
        raise UserError(f"no job {job_id} in {project.root}")
    return job_dict(job)


def params_from(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--params is not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(value, dict):
        raise UserError(f"--params must be a JSON object, got {type(value).__name__}")
    return value


def json_file(path: str, what: str) -> Any:
    """The JSON value in the file ``path`` (``-``: standard input); one that
    cannot be read, is not UTF-8 text or is not JSON is one line naming ``what``
    (the option or argument it came from)."""
    from pathlib import Path

    where = f"{what} (standard input)" if path == "-" else f"{what} {path}"
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{where}: cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise UserError(f"{where} is not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(
            f"{where} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None


def cwd_on_path() -> None:
    """``--import mymodule`` finds a module in the current folder, as uvicorn and
    celery do (a console script's path starts at its own bin folder)."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


def optional_module(name: str, what: str, *, extra: str):
    """Import a part that may be absent: not in this build, or its extra not installed."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise UserError(f"this build of nw-jobs has no {name} ({what})") from None
        hint = f": pip install 'nw-jobs[{extra}]'" if extra else ""
        raise UserError(f"{what} needs {exc.name}, which is not installed{hint}") from None


def import_modules(modules: Sequence[str]) -> None:
    import importlib

    cwd_on_path()
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UserError(f"--import {name}: {exc}") from None


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` or plain seconds."""
    raw = text.strip().lower()
    unit = _UNITS.get(raw[-1:]) if raw else None
    number = raw[:-1] if unit else raw
    try:
        value = float(number) * (unit or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an age like 30d, 12h, 90m or seconds, got {text!r}"
        ) from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected an age of 0 or more, got {text!r}")
    return value


def age_text(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


def parse_since(text: str) -> float:
    """An ISO 8601 time (with its zone; a bare date is UTC midnight) or an age ago."""
    from datetime import UTC, datetime

    try:
        return time.time() - parse_age(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UserError(
            f"--since {text!r}: give a time (2026-12-01T09:00+00:00, 2026-12-01) or an age (2h, 1d)"
        ) from None
    if when.tzinfo is None:
        if len(text) > 10:
            raise UserError(f"--since {text!r}: give the time zone (e.g. +00:00)")
        when = when.replace(tzinfo=UTC)
    return when.timestamp()
