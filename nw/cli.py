"""``nw-jobs``: the command line over the facade.

Each subcommand is a thin call into ``nw.jobs``; what a person sees is in
``nw.cli_render`` (rich on a terminal, plain lines in a pipe, ``--json`` for
scripts). What nw raises on purpose (``nw.errors``: a bad id, a missing
project, malformed JSON, a broken setting, an unreachable store) ends in one
line on stderr and exit status 1; set ``NW_JOBS_DEBUG=1`` to see the traceback
anyway. Anything else is a bug and keeps its traceback.

Exit statuses: 0 ok (``watch``: the job succeeded), 1 error, 2 usage,
3 ``watch``: the job failed, 4 ``watch``: the job was cancelled,
124 ``watch --timeout`` ran out, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from nw.errors import InvalidInput, NwJobsError

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


# ----- helpers ---------------------------------------------------------------------
def _console(*, stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")


def _project(args: argparse.Namespace):
    from nw import Project

    root = args.project or os.environ.get(PROJECT_ENV) or os.getcwd()
    return Project(root)


def _projects(args: argparse.Namespace) -> list:
    from nw import Project

    roots = args.project or [os.environ.get(PROJECT_ENV) or os.getcwd()]
    return [Project(root) for root in roots]


def _resolve_id(project, text: str) -> str:
    """A full job id, or a unique prefix of one (``list`` shows 12 characters)."""
    from nw.jobs import DEFAULT_CONFIG
    from nw.jobs.ids import is_job_id
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


def _job_dict(job) -> dict[str, Any]:
    from nw.jobs import to_dict

    return to_dict(job)


def _one_job(project, job_id: str, call: Callable[..., Any]) -> dict[str, Any]:
    """``call(project, job_id)`` (get or cancel) as a dict; a missing job is a user error."""
    job = call(project, job_id)
    if job is None:
        raise UserError(f"no job {job_id} in {project.root}")
    return _job_dict(job)


def _params(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--params is not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(value, dict):
        raise UserError(f"--params must be a JSON object, got {type(value).__name__}")
    return value


def cwd_on_path() -> None:
    """``--import mymodule`` finds a module in the current folder, as uvicorn and
    celery do (a console script's path starts at its own bin folder)."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)


# ----- commands --------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    from nw.cli_render import jobs_table
    from nw.jobs import list_jobs

    project = _project(args)
    before = _resolve_id(project, args.before) if args.before else None
    found = list_jobs(
        project,
        status=args.status,
        kind=args.kind,
        actor=args.actor,
        grade=args.grade,
        q=args.search,
        before=before,
        limit=args.limit,
    )
    jobs = [_job_dict(j) for j in found]
    if args.json:
        _print_json(jobs)
        return EXIT_OK
    console = _console()
    if not jobs:
        console.print(f"no {'more ' if before else ''}jobs in {project.root}{_filters_said(args)}")
        return EXIT_OK
    title = f"{project.title} — {len(jobs)} job(s){_filters_said(args)}"
    console.print(jobs_table(jobs, title=title, width=console.width))
    if len(jobs) == args.limit:  # a full page: say how to get the next one
        console.print(f"older: nw-jobs list --before {jobs[-1]['job_id'][:12]}", soft_wrap=True)
    return EXIT_OK


def _filters_said(args: argparse.Namespace) -> str:
    said = [
        f"{name} {value}"
        for name, value in (
            ("status", args.status),
            ("kind", args.kind),
            ("actor", args.actor),
            ("grade", args.grade),
            ("label with", args.search and repr(args.search)),
        )
        if value
    ]
    return f" ({', '.join(said)})" if said else ""


def cmd_show(args: argparse.Namespace) -> int:
    from nw.cli_render import job_detail
    from nw.jobs import get_job, get_job_progress

    project = _project(args)
    job_id = _resolve_id(project, args.id)
    data = _one_job(project, job_id, get_job)
    trail = get_job_progress(project, job_id, limit=1000)
    if args.json:
        _print_json({**data, "progress_trail": trail, "quote": _quote_of(project, data)})
        return EXIT_OK
    _console().print(job_detail(data, trail, quote=_quote_of(project, data)))
    return EXIT_OK


def _quote_of(project, job: dict[str, Any]) -> dict[str, Any] | None:
    """Today's quote of a plan job (its ``as_of`` figure beside it); None without a plan."""
    from nw.jobs import estimate

    params = job.get("params") or {}
    if not isinstance(params.get("plan"), dict):
        return None
    try:
        return estimate(project, job["kind"], params).get("quote")
    except NwJobsError:  # a plan that no longer reads: the job's own figures still show
        return None


def cmd_watch(args: argparse.Namespace) -> int:
    from nw.cli_render import plain_line
    from nw.jobs import get_job

    project = _project(args)
    job_id = _resolve_id(project, args.id)

    def fetch() -> dict[str, Any]:
        return _one_job(project, job_id, get_job)

    data = fetch()
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    console = _console()
    if args.json or not console.is_terminal:
        data = _watch_lines(fetch, data, args, deadline, plain_line)
    else:
        data = _watch_live(fetch, data, args, deadline, console)
    if data["status"] not in WATCH_EXIT:
        _console(stderr=True).print(f"nw-jobs: still {data['status']} after {args.timeout}s")
        return EXIT_TIMEOUT
    return WATCH_EXIT[data["status"]]


def _watch_lines(fetch, data, args, deadline, plain_line) -> dict[str, Any]:
    """A line (or a JSON object) each time something a person cares about changes."""
    last = None
    while True:
        # A line per 5 points of progress, not one per poll of a smoothly moving pct.
        step = None if data.get("pct") is None else int(data["pct"] // 5)
        gist = (data["status"], step, data.get("progress"), data.get("cost"))
        if gist != last:
            last = gist
            line = json.dumps(data, default=str) if args.json else plain_line(data)
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        if data["status"] in WATCH_EXIT or (deadline and time.monotonic() >= deadline):
            return data
        time.sleep(args.interval)
        data = fetch()


def _watch_live(fetch, data, args, deadline, console) -> dict[str, Any]:
    from rich.console import Group
    from rich.live import Live
    from rich.table import Table
    from rich.text import Text

    from nw.cli_render import (
        GRADE_STYLE,
        bar,
        cost_text,
        eta_text,
        outcome_text,
        pct_text,
        stage_text,
        status_cell,
    )

    def frame(job: dict[str, Any]) -> Group:
        title = Text.assemble(
            (job.get("label") or job["kind"], "bold"),
            "  ",
            status_cell(job),
            "  ",
            (job["job_id"][:12], "dim"),
        )
        line = Table.grid(padding=(0, 2))
        line.add_row(bar(job, width=40), Text(pct_text(job), style="bold"), Text(eta_text(job)))
        detail = Text(f"stage {stage_text(job)}   cost {cost_text(job)}")
        rows: list[Any] = [title, line, detail]
        if job.get("grade"):
            style = GRADE_STYLE.get(job["grade"], "")
            rows.append(Text(f"{job['grade']}: {outcome_text(job) or job['status']}", style=style))
        return Group(*rows)

    with Live(frame(data), console=console, refresh_per_second=8) as live:
        while data["status"] not in WATCH_EXIT:
            if deadline and time.monotonic() >= deadline:
                break
            time.sleep(args.interval)
            data = fetch()
            live.update(frame(data))
    return data


def cmd_cancel(args: argparse.Namespace) -> int:
    from nw.cli_render import plain_line
    from nw.jobs import cancel_job

    project = _project(args)
    job_id = _resolve_id(project, args.id)
    data = _one_job(project, job_id, cancel_job)
    if args.json:
        _print_json(data)
        return EXIT_OK
    console = _console()
    if data["status"] in ("succeeded", "failed") or (
        data["status"] == "cancelled" and data.get("error_kind") != "cancelled"
    ):
        console.print(f"already finished ({data['status']}); nothing to cancel")
    elif data["status"] == "cancelling":
        console.print("cancel requested; the job stops at its next boundary")
    else:
        console.print("cancelled")
    console.print(plain_line(data), soft_wrap=True)
    return EXIT_OK


def cmd_limits(args: argparse.Namespace) -> int:
    """List the limits, set one (``set KEY --max-running N --per-second N``) or
    remove one (``remove KEY``)."""
    from nw.jobs import list_limits, set_limit

    project = _project(args)
    if args.action in ("set", "remove") and not args.key:
        raise UserError(f"nw-jobs limits {args.action} needs a KEY")
    if args.action == "set":
        if args.max_running is None and args.per_second is None:
            raise UserError("nw-jobs limits set needs --max-running and/or --per-second")
        set_limit(project, args.key, max_running=args.max_running, per_second=args.per_second)
    elif args.action == "remove":
        set_limit(project, args.key)
    elif args.key or args.max_running is not None or args.per_second is not None:
        raise UserError("nw-jobs limits (list) takes no KEY or caps; use set or remove")
    rows = list_limits(project)
    if args.json:
        _print_json(rows)
        return EXIT_OK
    console = _console()
    if not rows:
        console.print("no limits")
        return EXIT_OK
    for lim in rows:
        caps = []
        if lim["max_running"] is not None:
            caps.append(f"running {lim['running']} of {lim['max_running']}")
        if lim["per_second"] is not None:
            caps.append(
                f"started {lim['started_last_s']} in the last second of {lim['per_second']}/s"
            )
        console.print(f"{lim['key']}: {', '.join(caps)} ({lim['scope']})", soft_wrap=True)
    return EXIT_OK


def cmd_enqueue(args: argparse.Namespace) -> int:
    """One job of a registered kind, or ``--batch FILE``: a JSON array of items
    (``[kind, params]`` or ``{"kind", "params", "idempotency_key"?, "label"?,
    "actor"?, "priority"?, "not_before"?, "limit_key"?}``), enqueued all or
    nothing by ``enqueue_many``."""
    from nw.jobs import enqueue, enqueue_many

    _import_modules(args.imports or ())
    project = _project(args)
    if (args.kind is None) == (args.batch is None):
        raise UserError("enqueue takes a KIND or --batch FILE (one of them)")
    if args.batch is not None:
        if args.params is not None:
            raise UserError("--params goes with KIND; a --batch item carries its own")
        items = _batch(args.batch)
        jobs = enqueue_many(project, items, approved=args.approved)
    else:
        params = _params(args.params or "{}")
        jobs = [enqueue(project, args.kind, params, label=args.label, approved=args.approved)]
    rows = [_job_dict(j) for j in jobs]
    if args.json:
        _print_json(rows if args.batch is not None else rows[0])
        return EXIT_OK
    from nw.cli_render import plain_line

    for row in rows:
        print(plain_line(row))
    return EXIT_OK


def _batch(path: str) -> list[Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(f"--batch {path}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UserError(f"--batch is not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(value, list):
        raise UserError(f"--batch must be a JSON array of items, got {type(value).__name__}")
    return value


def cmd_estimate(args: argparse.Namespace) -> int:
    from nw.jobs import estimate
    from nw.jobs.kinds import registered_kinds

    project = _project(args)
    _import_modules(args.imports or ())
    params = _params(args.params)
    known = registered_kinds()
    if args.kind not in known:
        raise UserError(
            f"unknown kind {args.kind!r}; known kinds: {', '.join(known) or 'none'}"
            " (--import MODULE registers a module's kinds)"
        )
    if params.get("plan") is not None:
        from nw.errors import PlanError
        from nw.jobs.costing import with_plan_dict

        try:
            with_plan_dict(params)
        except PlanError as exc:  # why, in one line (the facade would log it and say "unknown")
            raise UserError(f"params['plan'] cannot be read as a plan: {exc}") from None
    result = estimate(project, args.kind, params)
    if args.json:
        _print_json(result)
        return EXIT_OK
    from nw.cli_render import usd

    console = _console()
    cost = result.get("estimated_usd")
    shown = "unknown" if cost is None else usd(cost)
    if cost is not None and result.get("has_unknown_costs"):
        shown = f"≥ {shown}"
    console.print(f"{args.kind}: estimated cost {shown}")
    gate = "requires approval" if result.get("requires_approval") else "within the approval limit"
    console.print(f"{gate} (threshold {usd(result['approval_threshold_usd'])})")
    if result.get("reason"):
        console.print(str(result["reason"]))
    return EXIT_OK


def cmd_spend(args: argparse.Namespace) -> int:
    from nw.cli_render import totals_view
    from nw.jobs import spend, totals

    project = _project(args)
    data = {**totals(project), "committed": spend(project)}
    if args.json:
        _print_json(data)
        return EXIT_OK
    _console().print(totals_view(data, title=f"{project.title} — spend and counts"))
    return EXIT_OK


def cmd_workers(args: argparse.Namespace) -> int:
    from nw.cli_render import workers_table
    from nw.jobs import workers

    project = _project(args)
    found = workers(project)
    if args.json:
        _print_json(found)
        return EXIT_OK
    console = _console()
    if not found:
        console.print(f"no workers announced for {project.root} (start one: nw-jobs worker)")
        return EXIT_OK
    console.print(workers_table(found, title=f"{project.title} — workers"))
    return EXIT_OK


def cmd_retry(args: argparse.Namespace) -> int:
    from nw.cli_render import plain_line
    from nw.jobs import retry_job, retry_jobs

    project = _project(args)
    _import_modules(args.imports or ())
    bulk = args.failed or args.cancelled
    if bool(args.id) == bool(bulk):
        raise UserError("retry takes a job id, or --failed / --cancelled (with --kind, --since)")
    if args.id:
        if args.kind or args.since:
            raise UserError("--kind and --since go with --failed or --cancelled, not an id")
        job = retry_job(project, _resolve_id(project, args.id), approved=args.approve)
        if job is None:
            raise UserError(f"no job {args.id} in {project.root}")
        jobs = [job]
    else:
        if args.failed and args.cancelled:
            raise UserError("choose --failed or --cancelled")
        status = "failed" if args.failed else "cancelled"
        since = _since(args.since) if args.since else None
        jobs = retry_jobs(
            project, status=status, kind=args.kind, since=since, approved=args.approve
        )
    rows = [_job_dict(j) for j in jobs]
    if args.json:
        _print_json(rows)
        return EXIT_OK
    console = _console()
    console.print(f"{len(rows)} job(s) queued again" if rows else "nothing to retry")
    for row in rows:
        console.print(plain_line(row), soft_wrap=True)
    return EXIT_OK


def cmd_prune(args: argparse.Namespace) -> int:
    from nw.jobs import prune

    project = _project(args)
    deleted = prune(project, older_than_s=args.older_than)
    if args.json:
        _print_json({"deleted": deleted, "older_than_s": args.older_than})
        return EXIT_OK
    _console().print(
        f"pruned {deleted} finished job(s) older than {_age_text(args.older_than)};"
        " their spend stays in the totals"
    )
    return EXIT_OK


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _age(text: str) -> float:
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


def _age_text(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


def _since(text: str) -> float:
    """An ISO 8601 time (with its zone; a bare date is UTC midnight) or an age ago."""
    from datetime import UTC, datetime

    try:
        return time.time() - _age(text)
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


def cmd_summarize(args: argparse.Namespace) -> int:
    from nw import Project
    from nw.cli_render import jobs_table
    from nw.jobs import summarize

    roots = args.roots or [args.project or os.environ.get(PROJECT_ENV) or os.getcwd()]
    projects = [Project(root) for root in roots]
    rows = []
    for project in projects:
        for job in summarize(project, limit=args.limit, status=args.status):
            rows.append({**_job_dict(job), "project": str(project.root)})
    if args.json:
        _print_json(rows)
        return EXIT_OK
    console = _console()
    for project in projects:
        jobs = [r for r in rows if r["project"] == str(project.root)]
        if jobs:
            title = f"{project.root} — {len(jobs)} job(s)"
            console.print(jobs_table(jobs, title=title, width=console.width))
        else:
            console.print(f"{project.root}: no jobs")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    from nw.demo import DEMO_DIR, run_demo

    if os.environ.pop("NW_JOBS_DATABASE_URL", None):
        # The demo shows the embedded store; it must not write demo jobs into a database.
        _console(stderr=True).print(
            "the demo uses the embedded store; NW_JOBS_DATABASE_URL ignored"
        )
    from pathlib import Path

    root = Path(args.project or DEMO_DIR)
    if root.exists() and not root.is_dir():
        raise UserError(f"--project {root}: not a folder (give a folder for the demo project)")
    # With --json the live view goes to stderr, so stdout is only the JSON.
    try:
        result = run_demo(
            root,
            console=_console(stderr=args.json),
            plain=True if (args.plain or args.json) else None,
            speed=args.speed,
        )
    except OSError as exc:  # a folder that cannot be made or written
        raise UserError(f"--project {root}: {exc.strerror or exc}") from None
    if args.json:
        _print_json(result)
    return EXIT_OK if result["finished"] else EXIT_ERROR


def _optional_module(name: str, what: str, *, extra: str):
    """Import a part that may be absent: not in this build, or its extra not installed."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise UserError(f"this build of nw-jobs has no {name} ({what})") from None
        hint = f": pip install 'nw-jobs[{extra}]'" if extra else ""
        raise UserError(f"{what} needs {exc.name}, which is not installed{hint}") from None


def _import_modules(modules: Sequence[str]) -> None:
    import importlib

    cwd_on_path()
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UserError(f"--import {name}: {exc}") from None


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from nw.jobs.web import create_app
    except ImportError as exc:
        raise UserError(
            f"serve needs the web extra ({exc.name} is missing): pip install 'nw-jobs[web]'"
        ) from None
    projects = _projects(args)
    _import_modules(args.imports or ())
    token = args.token or os.environ.get(TOKEN_ENV) or None
    from nw.jobs.web.app import LOOPBACK_HOSTS

    # Bound to loopback, only a loopback name may reach it: a page on another
    # site cannot DNS-rebind its way to the API.
    loopback = args.host in ("127.0.0.1", "localhost", "::1")
    app = create_app(
        projects,
        token=token,
        max_body_bytes=args.max_body_bytes,
        allowed_hosts=LOOPBACK_HOSTS if loopback else None,
    )
    closing = app.state.closing
    _port_free(args.host, args.port)
    where = f"http://{args.host}:{args.port}/"
    console = _console(stderr=True)
    console.print(
        f"nw-jobs tray on {where} for {', '.join(str(p.root) for p in projects)}", soft_wrap=True
    )
    if token:
        # The page trades ?token= for an HttpOnly cookie and drops it from the address bar.
        console.print(f"bearer token required; open {where}?token={token}", soft_wrap=True)
    config = uvicorn.Config(
        app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=3
    )
    server = uvicorn.Server(config)
    stop = server.handle_exit

    def handle_exit(sig: int, frame: Any) -> None:
        closing.set()  # open trays' event streams end now, so Ctrl-C stops at once
        stop(sig, frame)

    server.handle_exit = handle_exit  # type: ignore[method-assign]
    server.run()
    return EXIT_OK


def _port_free(host: str, port: int) -> None:
    """Refuse a taken port before the URL is announced (uvicorn would only log it)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UserError(f"--host {host}: {exc.strerror or exc}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(addr)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(
                    f"port {port} on {host} is taken (another server?); choose one with --port"
                ) from None
            raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def cmd_worker(args: argparse.Namespace, extra: Sequence[str] = ()) -> int:
    worker = _optional_module("nw.jobs.worker", "the worker", extra="")
    argv: list[str] = []
    for root in args.project or [os.environ.get(PROJECT_ENV) or os.getcwd()]:
        argv += ["--project", root]
    for module in args.imports or ():
        argv += ["--import", module]
    if args.max_concurrent is not None:
        argv += ["--max-concurrent", str(args.max_concurrent)]
    if args.log_level:
        argv += ["--log-level", args.log_level]
    result = worker.main([*argv, *extra])
    return int(result or 0)


def cmd_db_migrate(args: argparse.Namespace) -> int:
    url = args.database_url or os.environ.get("NW_JOBS_DATABASE_URL")
    if not url:
        raise UserError("db migrate needs --database-url or NW_JOBS_DATABASE_URL")
    postgres = _optional_module("nw.jobs.stores.postgres", "db migrate", extra="postgres")
    applied = postgres.migrate(url)
    if applied:
        _console().print("applied: " + ", ".join(applied))
    else:
        _console().print("the schema is up to date")
    return EXIT_OK


# ----- parser ----------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of at least 1, got {value}")
    return value


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

    p = add("list", cmd_list, "this project's jobs, newest first, a page at a time", [one, as_json])
    p.add_argument("--status", help="only jobs with this status (queued, running, …)")
    p.add_argument("--kind", help="only jobs of this kind")
    p.add_argument("--actor", help="only jobs of this actor id")
    p.add_argument("--grade", help="only finished jobs of this grade (ok, notice, warning, error)")
    p.add_argument("-q", "--search", metavar="TEXT", help="only jobs whose label contains TEXT")
    p.add_argument(
        "--before", metavar="ID", help="the page after this job (the id a full page ends with)"
    )
    p.add_argument("--limit", type=_positive_int, default=20, help="at most N jobs (20)")

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

    p = add("enqueue", cmd_enqueue, "queue a job of a registered kind (or a batch)", [one, as_json])
    p.add_argument("kind", nargs="?", help="the job kind, e.g. panel.animate")
    p.add_argument("--params", help="the render params as a JSON object ({})")
    p.add_argument("--label", help="a label for the job")
    p.add_argument(
        "--batch",
        metavar="FILE",
        help="a JSON array of items ([kind, params] or {kind, params, ...}); - for stdin",
    )
    p.add_argument("--approved", action="store_true", help="approve an unknown or large cost")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first (it registers kinds)",
    )

    p = add("estimate", cmd_estimate, "dry-run cost gate for a render", [one, as_json])
    p.add_argument("kind", help="the job kind, e.g. panel.animate")
    p.add_argument("--params", default="{}", help="the render params as a JSON object")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first (it registers kinds)",
    )

    add("spend", cmd_spend, "spend today and this week by kind and actor; counts", [one, as_json])

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
        "--older-than", type=_age, required=True, metavar="AGE", help="e.g. 30d, 12h, 90m"
    )

    p = add("summarize", cmd_summarize, "jobs of several projects, read-only", [one, as_json])
    p.add_argument("roots", nargs="*", metavar="ROOT", help="project folders (default: --project)")
    p.add_argument("--status", help="only jobs with this status")
    p.add_argument("--limit", type=_positive_int, default=20, help="at most N jobs per project")

    p = add("serve", cmd_serve, "serve the web tray and the JSON API", [many])
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (127.0.0.1)")
    p.add_argument("--port", type=_positive_int, default=8765, help="port (8765)")
    p.add_argument("--token", help=f"require this bearer token (default: ${TOKEN_ENV})")
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first (it registers kinds POST /api/jobs may start)",
    )
    p.add_argument(
        "--max-body-bytes", type=_positive_int, default=64 * 1024, help="request body limit"
    )

    p = add("worker", cmd_worker, "run queued jobs of registered kinds", [many])
    p.add_argument(
        "--import",
        dest="imports",
        action="append",
        metavar="MODULE",
        help="import MODULE first (it registers kinds)",
    )
    p.add_argument("--max-concurrent", type=_positive_int, help="bodies at once")
    p.add_argument(
        "--log-level",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        help="INFO (default): a line per job start and end (kind, id, attempt, outcome, seconds)",
    )

    db = sub.add_parser("db", help="database maintenance", description="database maintenance")
    db_sub = db.add_subparsers(dest="db_command", metavar="COMMAND")
    p = db_sub.add_parser("migrate", help="create or upgrade the PostgreSQL schema", parents=[one])
    p.add_argument("--database-url", help="postgresql://… (default: $NW_JOBS_DATABASE_URL)")
    p.set_defaults(func=cmd_db_migrate)
    db.set_defaults(func=None, parser=db)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.version:
        from nw import __version__

        print(f"nw-jobs {__version__}")
        return EXIT_OK
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    if getattr(args, "func", None) is None:  # `nw-jobs db` alone
        args.parser.print_help()
        return EXIT_USAGE
    if extra and args.command != "worker":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        if args.command == "worker":
            return cmd_worker(args, extra)
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except NwJobsError as exc:
        # Raised on purpose with a message for a person: the input, the setup or
        # the store. Anything else is a bug and keeps its traceback.
        if os.environ.get(DEBUG_ENV):
            raise
        sys.stderr.write(f"nw-jobs: error: {str(exc) or type(exc).__name__}\n")
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
