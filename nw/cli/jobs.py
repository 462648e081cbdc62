"""Subcommands over single jobs and pages of them: ``list``, ``show``,
``watch`` (plain lines in a pipe, a live view on a terminal), ``cancel``,
``retry``."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from nw.cli.common import (
    EXIT_OK,
    EXIT_TIMEOUT,
    WATCH_EXIT,
    UserError,
    import_modules,
    job_dict,
    json_file,
    make_console,
    one_job,
    params_from,
    parse_since,
    print_json,
    project_from,
    resolve_id,
)
from nw.errors import NwJobsError


def cmd_list(args: argparse.Namespace) -> int:
    from nw.cli.render import jobs_table
    from nw.jobs import list_jobs

    project = project_from(args)
    before = resolve_id(project, args.before) if args.before else None
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
    jobs = [job_dict(j) for j in found]
    if args.json:
        print_json(jobs)
        return EXIT_OK
    console = make_console()
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
    from nw.cli.render import job_detail
    from nw.jobs import get_job, get_job_progress

    project = project_from(args)
    job_id = resolve_id(project, args.id)
    data = one_job(project, job_id, get_job)
    trail = get_job_progress(project, job_id, limit=1000)
    if args.json:
        print_json({**data, "progress_trail": trail, "quote": _quote_of(project, data)})
        return EXIT_OK
    make_console().print(job_detail(data, trail, quote=_quote_of(project, data)))
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
    from nw.cli.render import plain_line, shown_json
    from nw.jobs import get_job

    project = project_from(args)
    job_id = resolve_id(project, args.id)

    def fetch() -> dict[str, Any]:
        return one_job(project, job_id, get_job)

    data = fetch()
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    console = make_console()
    if args.json or not console.is_terminal:
        data = _watch_lines(fetch, data, args, deadline, plain_line, shown_json)
    else:
        data = _watch_live(fetch, data, args, deadline, console)
    if data["status"] not in WATCH_EXIT:
        make_console(stderr=True).print(f"nw-jobs: still {data['status']} after {args.timeout}s")
        return EXIT_TIMEOUT
    return WATCH_EXIT[data["status"]]


def _watch_lines(fetch, data, args, deadline, plain_line, shown_json) -> dict[str, Any]:
    """A line (or a JSON object) each time something a person cares about changes."""
    last = None
    while True:
        # A line per 5 points of progress, not one per poll of a smoothly moving pct.
        step = None if data.get("pct") is None else int(data["pct"] // 5)
        gist = (data["status"], step, data.get("progress"), data.get("cost"))
        if gist != last:
            last = gist
            line = shown_json(data, indent=None) if args.json else plain_line(data)
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

    from nw.cli.render import (
        GRADE_STYLE,
        bar,
        cost_text,
        eta_text,
        outcome_text,
        pct_text,
        stage_text,
        status_cell,
        text,
    )

    def frame(job: dict[str, Any]) -> Group:
        title = Text.assemble(
            text(job.get("label") or job["kind"], style="bold"),
            "  ",
            status_cell(job),
            "  ",
            (job["job_id"][:12], "dim"),
        )
        line = Table.grid(padding=(0, 2))
        line.add_row(bar(job, width=40), Text(pct_text(job), style="bold"), Text(eta_text(job)))
        detail = text(f"stage {stage_text(job)}   cost {cost_text(job)}")
        rows: list[Any] = [title, line, detail]
        if job.get("grade"):
            style = GRADE_STYLE.get(job["grade"], "")
            rows.append(text(f"{job['grade']}: {outcome_text(job) or job['status']}", style=style))
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
    from nw.cli.render import plain_line
    from nw.jobs import cancel_job

    project = project_from(args)
    job_id = resolve_id(project, args.id)
    data = one_job(project, job_id, cancel_job)
    if args.json:
        print_json(data)
        return EXIT_OK
    console = make_console()
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


def cmd_retry(args: argparse.Namespace) -> int:
    from nw.cli.render import plain_line
    from nw.jobs import retry_job, retry_jobs

    project = project_from(args)
    import_modules(args.imports or ())
    bulk = args.failed or args.cancelled
    if bool(args.id) == bool(bulk):
        raise UserError("retry takes a job id, or --failed / --cancelled (with --kind, --since)")
    if args.id:
        if args.kind or args.since:
            raise UserError("--kind and --since go with --failed or --cancelled, not an id")
        job = retry_job(project, resolve_id(project, args.id), approved=args.approve)
        if job is None:
            raise UserError(f"no job {args.id} in {project.root}")
        jobs = [job]
    else:
        if args.failed and args.cancelled:
            raise UserError("choose --failed or --cancelled")
        status = "failed" if args.failed else "cancelled"
        since = parse_since(args.since) if args.since else None
        jobs = retry_jobs(
            project, status=status, kind=args.kind, since=since, approved=args.approve
        )
    rows = [job_dict(j) for j in jobs]
    if args.json:
        print_json(rows)
        return EXIT_OK
    console = make_console()
    console.print(f"{len(rows)} job(s) queued again" if rows else "nothing to retry")
    for row in rows:
        console.print(plain_line(row), soft_wrap=True)
    return EXIT_OK


def cmd_enqueue(args: argparse.Namespace) -> int:
    """One job of a registered kind, or ``--batch FILE``: a JSON array of items
    (``[kind, params]`` or ``{"kind", "params", "idempotency_key"?, "label"?,
    "actor"?, "priority"?, "not_before"?, "limit_key"?}``), enqueued all or
    nothing by ``enqueue_many``."""
    from nw.jobs import enqueue, enqueue_many

    import_modules(args.imports or ())
    project = project_from(args)
    if (args.kind is None) == (args.batch is None):
        raise UserError("enqueue takes a KIND or --batch FILE (one of them)")
    if args.batch is not None:
        if args.params is not None:
            raise UserError("--params goes with KIND; a --batch item carries its own")
        items = _batch(args.batch)
        jobs = enqueue_many(project, items, approved=args.approved)
    else:
        params = params_from(args.params or "{}")
        jobs = [enqueue(project, args.kind, params, label=args.label, approved=args.approved)]
    rows = [job_dict(j) for j in jobs]
    if args.json:
        print_json(rows if args.batch is not None else rows[0])
        return EXIT_OK
    from nw.cli.render import plain_line

    for row in rows:
        print(plain_line(row))
    return EXIT_OK


def _batch(path: str) -> list[Any]:
    value = json_file(path, "--batch")
    if not isinstance(value, list):
        raise UserError(f"--batch must be a JSON array of items, got {type(value).__name__}")
    return value
