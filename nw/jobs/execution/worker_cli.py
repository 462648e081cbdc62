"""The worker's command line, defined once: ``nw-jobs worker`` (a subcommand of
``nw.cli.parser``) and ``python -m nw.jobs.execution.worker`` add the same arguments
(``add_arguments``) and hand the same namespace to ``serve``, which runs the worker.

Kept apart from ``nw.jobs.execution.worker`` so building the ``nw-jobs`` parser does not
import the worker itself.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from nw.errors import JobStoreError, NwJobsError, ProjectError
from nw.jobs.core import kinds
from nw.jobs.core.model import WORKER_LOG_LEVELS, JobsConfig
from nw.jobs.execution.credentials import SecretsProvider, env_secrets
from nw.project import as_project

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


NO_KINDS = (
    "nw-jobs worker: no kinds to run. Register some: --import MODULE (a module that"
    " calls nw.jobs.register_kind; the current folder is searched), or an"
    " `nw.jobs.kinds` entry point in an installed package"
)


def _load_secrets_provider(path: str) -> SecretsProvider:
    spec = kinds.KindSpec("secrets", path)
    return spec.load()


LOG_FORMAT = "%(asctime)s %(name)s %(message)s"


class _LineFormatter(logging.Formatter):
    """``LOG_FORMAT``, its date spelled once a second, not once a line (at INFO a
    busy worker logs a line per job)."""

    def __init__(self) -> None:
        super().__init__(LOG_FORMAT)
        self._second: int | None = None
        self._date = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:  # the handler's lock is held: one record at a time
            self._date = time.strftime(self.default_time_format, self.converter(record.created))
            self._second = second
        return f"{self._date},{int(record.msecs):03d}"  # as ``default_msec_format``


_LOOKUPS = (logging.logThreads, logging.logProcesses, logging.logMultiprocessing, logging._srcfile)
"""What a log record looks up as this process started (thread, process, caller)."""


def _log_to_stderr(level: str) -> logging.Handler | None:
    """The worker's log on stderr at ``level``, unless the process already logs
    somewhere (then, as ``logging.basicConfig``, nothing changes: None). A
    record of this process then looks up no thread, process or source line:
    the format names none, and at INFO a record is made per job (the worker's
    hottest log call: ``Worker._released``). ``_lookups_for_others`` gives
    them back once anything else logs here."""
    if logging.getLogger().handlers:
        return None
    handler = logging.StreamHandler()
    handler.setFormatter(_LineFormatter())
    logging.basicConfig(level=level, handlers=[handler])
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging._srcfile = None  # no findCaller: the format has no %(lineno)s
    return handler


def _lookups_for_others(ours: logging.Handler | None) -> None:
    """Records look up their thread, process and caller again when a handler
    other than the worker's own (``ours``) was set up in this process, e.g. by
    an ``--import`` module: its format may name them."""
    loggers = [logging.getLogger()] + [
        lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    others = (h for lg in loggers for h in lg.handlers if h is not ours)
    if ours is not None and any(not isinstance(h, logging.NullHandler) for h in others):
        (logging.logThreads, logging.logProcesses, logging.logMultiprocessing,
         logging._srcfile) = _LOOKUPS  # fmt: skip


def serve(args: argparse.Namespace) -> int:
    """Run a worker as ``args`` say (this module's namespace), until a signal.
    The worker is imported here, when one runs, not when the parser is built."""
    from nw.jobs.api import tracing
    from nw.jobs.execution.worker import Worker

    ours = _log_to_stderr(args.log_level)
    here = os.getcwd()  # --import finds a module in the current folder, as uvicorn does
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
    for module in args.imports or ():
        try:
            importlib.import_module(module)
        except Exception as exc:
            print(f"nw-jobs worker: cannot import {module!r}: {exc}", file=sys.stderr)
            return 2
    _lookups_for_others(ours)
    overrides = config_overrides(args)
    # A stop asked for while the worker is being set up (it has announced itself
    # from then on) is kept and honoured once it exists: an exit, not a kill.
    asked_to_stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: asked_to_stop.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: asked_to_stop.append(signum))
    try:
        config = JobsConfig(**overrides)
        projects = args.project or [os.environ.get("NW_JOBS_PROJECT") or os.getcwd()]
        for root in projects:  # a typo must not make a project nobody enqueues to
            if not as_project(root).read_meta():
                raise ProjectError(
                    f"{as_project(root).root} is not an nw-jobs project (no .nw/project.json):"
                    f" check --project, or make one with nw-jobs init {root}"
                )
        secrets = _load_secrets_provider(args.secrets) if args.secrets else env_secrets
        worker = Worker(projects, config=config, secrets=secrets)
    except JobStoreError as exc:  # e.g. an unknown database role: one line, exit 1
        print(f"nw-jobs worker: {exc}", file=sys.stderr)
        return 1
    except NwJobsError as exc:  # a setting, a project or a --secrets target: one line
        print(f"nw-jobs worker: {exc}", file=sys.stderr)
        return 2
    if not worker.kinds():  # it would wait forever for jobs it can never claim
        print(NO_KINDS, file=sys.stderr)
        worker.close_unused()  # nothing ran: unregister and go
        return 2
    signal.signal(signal.SIGTERM, worker.stop)
    signal.signal(signal.SIGINT, worker.stop)
    if asked_to_stop:
        worker.stop()
    code = worker.run()
    stuck = [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread() and t.is_alive() and not t.daemon
    ]
    if stuck:  # bodies that ignored the grace period: their jobs are back in the queue
        tracing.flush()  # no exit handler runs after os._exit: export the spans now
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
