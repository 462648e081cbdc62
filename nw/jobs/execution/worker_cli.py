"""The worker's command line, defined once: ``nw-jobs worker`` (a subcommand of
``nw.cli.parser``) and ``python -m nw.jobs.execution.worker`` add the same arguments
(``add_arguments``) and hand the same namespace to ``worker.serve``.

Kept apart from ``nw.jobs.execution.worker`` so building the ``nw-jobs`` parser does not
import the worker itself.
"""

from __future__ import annotations

import argparse
from typing import Any

from nw.jobs.core.model import WORKER_LOG_LEVELS

PROG = "nw-jobs worker"
DESCRIPTION = "run queued jobs of registered kinds"

CONFIG_FLAGS = {
    "max_concurrent": "max_concurrent",
    "database_url": "database_url",
    "heartbeat_interval": "heartbeat_interval_s",
    "heartbeat_stale": "heartbeat_stale_s",
    "worker_beat_interval": "worker_beat_interval_s",
    "worker_stale": "worker_stale_s",
    "shutdown_grace": "shutdown_grace_s",
}
"""Each flag that sets a ``JobsConfig`` field (the namespace's name -> the field)."""


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (the CLI's too)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The worker's flags, added to ``parser`` (the subcommand's, or its own)."""
    parser.add_argument(
        "--project",
        action="append",
        metavar="DIR",
        help="project folder; repeat for several (default: $NW_JOBS_PROJECT, else .)",
    )
    parser.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first: a module that registers kinds (beside the"
        " nw.jobs.kinds entry points; the current folder is searched)",
    )
    parser.add_argument(
        "--max-concurrent", type=positive_int, metavar="N", help="bodies at once (10)"
    )
    parser.add_argument(
        "--database-url",
        metavar="URL",
        help="postgresql://… (default: $NW_JOBS_DATABASE_URL, else the project's own file)",
    )
    parser.add_argument(
        "--secrets",
        metavar="MODULE:CALLABLE",
        help="(kind, params) -> {name: value}, called before each body"
        " (default: the NW_SECRET_<NAME> environment variables)",
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        metavar="SECONDS",
        help="how often a running job's heartbeat is stamped (20)",
    )
    parser.add_argument(
        "--heartbeat-stale",
        type=float,
        metavar="SECONDS",
        help="a heartbeat younger than this proves the worker alive (120)",
    )
    parser.add_argument(
        "--worker-beat-interval",
        type=float,
        metavar="SECONDS",
        help="how often the worker stamps its own beat (1)",
    )
    parser.add_argument(
        "--worker-stale",
        type=float,
        metavar="SECONDS",
        help="a worker silent this long while others beat is dead; its jobs are reaped (6)",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=float,
        metavar="SECONDS",
        help="how long SIGTERM waits for running bodies (default 30)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        type=str.upper,
        choices=WORKER_LOG_LEVELS,
        help="INFO (default) logs one line per job as it ends (kind, id, attempt, outcome,"
        " seconds); DEBUG also its start; WARNING only problems",
    )
    return parser


def build_parser() -> argparse.ArgumentParser:
    """``python -m nw.jobs.execution.worker``'s parser: the subcommand's arguments, alone."""
    return add_arguments(argparse.ArgumentParser(prog=PROG, description=DESCRIPTION))


def config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The ``JobsConfig`` fields the flags given set."""
    return {
        field: getattr(args, name)
        for name, field in CONFIG_FLAGS.items()
        if getattr(args, name) not in (None, "")
    }
