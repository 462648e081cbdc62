"""The ``nw-jobs`` argument parser: one subparser per command."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from nw.cli import budget, pipelines
from nw.cli.common import (
    PROJECT_ENV,
    TOKEN_ENV,
    parse_age,
)
from nw.cli.demo import cmd_demo
from nw.cli.jobs import cmd_cancel, cmd_enqueue, cmd_list, cmd_retry, cmd_show, cmd_watch
from nw.cli.money import cmd_estimate, cmd_limits, cmd_spend
from nw.cli.ops import (
    cmd_db_migrate,
    cmd_init,
    cmd_prune,
    cmd_summarize,
    cmd_worker,
    cmd_workers,
)
from nw.cli.serve import cmd_serve
from nw.jobs.execution.worker_cli import DESCRIPTION as WORKER_DESCRIPTION
from nw.jobs.execution.worker_cli import add_arguments as add_worker_arguments
from nw.jobs.execution.worker_cli import positive_int


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nw-jobs",
        description="Durable, cancellable render jobs: watch, cancel and serve them.",
        epilog="Start with: nw-jobs demo",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    one = argparse.ArgumentParser(add_help=False)
    one.add_argument(
        "--project",
        metavar="DIR",
        help=f"project folder (default: ${PROJECT_ENV}, else the current folder)",
    )
    many = argparse.ArgumentParser(add_help=False)
    many.add_argument(
        "--project",
        metavar="DIR",
        action="append",
        help=f"project folder; repeat for several (default: ${PROJECT_ENV}, else .)",
    )
    imports = argparse.ArgumentParser(add_help=False)  # a kind's module, imported first
    imports.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first (it registers kinds)",
    )
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def add(name: str, func: Callable, help: str, parents: list) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=parents)
        p.set_defaults(func=func)
        return p

    p = add(
        "demo",
        cmd_demo,
        "run a small simulated render pipeline and show it live",
        [as_json],
    )
    p.add_argument("--project", metavar="DIR", help="demo project folder (default: ./nw-demo)")
    p.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    p.add_argument("--speed", type=_positive_float, default=1.0, help="run N times faster")

    p = add("init", cmd_init, "make a project folder (the other commands need one)", [one])
    p.add_argument("--title", help="the project's title (default: the folder's name)")

    p = add("list", cmd_list, "this project's jobs, newest first, a page at a time", [one, as_json])
    p.add_argument("--status", help="only jobs with this status (queued, running, …)")
    p.add_argument("--kind", help="only jobs of this kind")
    p.add_argument("--actor", help="only jobs of this actor id")
    p.add_argument("--grade", help="only finished jobs of this grade (ok, notice, warning, error)")
    p.add_argument("-q", "--search", metavar="TEXT", help="only jobs whose label contains TEXT")
    p.add_argument(
        "--before", metavar="ID", help="the page after this job (the id a full page ends with)"
    )
    p.add_argument("--limit", type=positive_int, default=20, help="at most N jobs (20)")

    p = add("show", cmd_show, "one job in detail", [one, as_json])
    p.add_argument("id", help="job id (or a unique prefix of one)")

    p = add(
        "watch",
        cmd_watch,
        "follow one job live until it ends (exit 0 succeeded, 3 failed, 4 cancelled)",
        [one, as_json],
    )
    p.add_argument("id", help="job id (or a unique prefix of one)")
    p.add_argument("--interval", type=_positive_float, default=0.25, help="poll every S (0.25)")
    p.add_argument("--timeout", type=_positive_float, help="give up after S seconds (exit 124)")

    p = add("cancel", cmd_cancel, "request a job's cancellation", [one, as_json])
    p.add_argument("id", help="job id (or a unique prefix of one)")

    p = add(
        "limits",
        cmd_limits,
        "concurrency and rate limits by key: list, set KEY, remove KEY",
        [one, as_json],
    )
    p.add_argument("action", nargs="?", choices=("list", "set", "remove"), default="list")
    p.add_argument("key", nargs="?", help="the limit key, e.g. fal:kling")
    p.add_argument("--max-running", type=int, help="at most N jobs of the key at once")
    p.add_argument("--per-second", type=int, help="at most N starts in any one second")

    about = "queue a job of a registered kind (or a batch)"
    p = add("enqueue", cmd_enqueue, about, [one, as_json, imports])
    p.add_argument("kind", nargs="?", help="the job kind, e.g. panel.animate")
    p.add_argument("--params", help="the render params as a JSON object ({})")
    p.add_argument("--label", help="a label for the job")
    p.add_argument(
        "--batch",
        metavar="FILE",
        help="a JSON array of items ([kind, params] or {kind, params, ...}); - for stdin",
    )
    p.add_argument("--approved", action="store_true", help="approve an unknown or large cost")

    p = add("estimate", cmd_estimate, "dry-run cost gate for a render", [one, as_json, imports])
    p.add_argument("kind", help="the job kind, e.g. panel.animate")
    p.add_argument("--params", default="{}", help="the render params as a JSON object")

    p = add(
        "spend", cmd_spend, "spend today and this week by kind and actor; counts", [one, as_json]
    )
    budget.add_accuracy_options(p, cmd_spend)
    budget.add_parsers(add, [one, as_json])
    pipelines.add_parsers(add, [one, as_json, imports])

    add("workers", cmd_workers, "the workers announced for this project", [one, as_json])

    p = add(
        "retry",
        cmd_retry,
        "run a failed or cancelled job again (or every one: --failed / --cancelled)",
        [one, as_json],
    )
    p.add_argument("id", nargs="?", help="job id (or a unique prefix of one)")
    p.add_argument("--failed", action="store_true", help="every failed job (with the filters)")
    p.add_argument("--cancelled", action="store_true", help="every cancelled job")
    p.add_argument("--kind", help="with --failed/--cancelled: only this kind")
    p.add_argument(
        "--since", metavar="WHEN", help="finished since WHEN: a time (ISO 8601) or an age (2h, 1d)"
    )
    p.add_argument(
        "--approve", action="store_true", help="approve a cost at or over the approval threshold"
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first (its kind registrations set the retry policy)",
    )

    p = add(
        "prune",
        cmd_prune,
        "delete finished jobs older than an age (their spend stays in the totals)",
        [one, as_json],
    )
    p.add_argument(
        "--older-than", type=parse_age, required=True, metavar="AGE", help="e.g. 30d, 12h, 90m"
    )
    p.add_argument("--dry-run", action="store_true", help="only count what would be pruned")
    p.add_argument(
        "--yes", action="store_true", help="do not ask first (needed without a terminal)"
    )

    p = add("summarize", cmd_summarize, "jobs of several projects, read-only", [one, as_json])
    p.add_argument("roots", nargs="*", metavar="ROOT", help="project folders (default: --project)")
    p.add_argument("--status", help="only jobs with this status")
    p.add_argument("--limit", type=positive_int, default=20, help="at most N jobs per project")

    p = add("serve", cmd_serve, "serve the web tray and the JSON API", [many])
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (127.0.0.1)")
    p.add_argument("--port", type=positive_int, default=8765, help="port (8765)")
    p.add_argument("--token", help=f"require this bearer token (default: ${TOKEN_ENV})")
    p.add_argument(
        "--allow-network-without-token",
        action="store_true",
        help="serve a non-loopback --host with no token (anyone who reaches it can run jobs)",
    )
    p.add_argument(
        "--public-url",
        metavar="URL",
        help="the base URL providers reach this server at: bodies that declare webhook_url"
        " get signed /hooks/ URLs under it (default: $NW_JOBS_PUBLIC_URL; workers read that)",
    )
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first (it registers kinds POST /api/jobs may start)",
    )
    p.add_argument(
        "--max-body-bytes", type=positive_int, default=64 * 1024, help="request body limit"
    )

    add_worker_arguments(add("worker", cmd_worker, WORKER_DESCRIPTION, []))

    db = sub.add_parser("db", help="database maintenance", description="database maintenance")
    db_sub = db.add_subparsers(dest="db_command", metavar="COMMAND")
    p = db_sub.add_parser("migrate", help="create or upgrade the PostgreSQL schema", parents=[one])
    p.add_argument("--database-url", help="postgresql://… (default: $NW_JOBS_DATABASE_URL)")
    p.set_defaults(func=cmd_db_migrate)
    db.set_defaults(func=None, parser=db)
    return parser
