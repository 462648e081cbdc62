"""Operating subcommands: ``workers``, ``prune``, ``summarize``, ``worker``
(delegates to ``nw.jobs.execution.worker``) and ``db migrate``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from nw.cli.common import (
    EXIT_OK,
    PROJECT_ENV,
    UserError,
    age_text,
    job_dict,
    make_console,
    optional_module,
    print_json,
    project_from,
)


def cmd_workers(args: argparse.Namespace) -> int:
    from nw.cli.project_views import workers_table
    from nw.jobs import workers

    project = project_from(args)
    found = workers(project)
    if args.json:
        print_json(found)
        return EXIT_OK
    console = make_console()
    if not found:
        console.print(f"no workers announced for {project.root} (start one: nw-jobs worker)")
        return EXIT_OK
    console.print(workers_table(found, title=f"{project.title} — workers"))
    return EXIT_OK


def cmd_prune(args: argparse.Namespace) -> int:
    """Delete finished jobs older than an age: with ``--dry-run`` only count
    them; otherwise ask first on a terminal, or take ``--yes``."""
    from nw.jobs import prune

    project = project_from(args)
    age = age_text(args.older_than)
    would = prune(project, older_than_s=args.older_than, dry_run=True)
    if args.dry_run or would == 0:
        if args.json:
            print_json({"deleted": 0, "would_delete": would, "older_than_s": args.older_than})
        elif would == 0:
            make_console().print(f"no finished job is older than {age}: nothing to prune")
        else:
            make_console().print(f"{would} finished job(s) older than {age} would be pruned")
        return EXIT_OK
    if not args.yes:
        question = f"prune {would} finished job(s) older than {age}?"
        if not sys.stdin.isatty():
            raise UserError(f"{question} Pass --yes to go ahead (--dry-run only counts them)")
        answer = input(f"{question} Their spend stays in the totals. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            make_console().print("nothing pruned")
            return EXIT_OK
    deleted = prune(project, older_than_s=args.older_than)
    if args.json:
        print_json({"deleted": deleted, "older_than_s": args.older_than})
        return EXIT_OK
    make_console().print(
        f"pruned {deleted} finished job(s) older than {age}; their spend stays in the totals"
    )
    return EXIT_OK


def cmd_init(args: argparse.Namespace) -> int:
    """Make a project folder (or say the one there is kept as it is)."""
    from nw import Project
    from nw.project import META_DIR, META_FILE

    root = args.project or os.environ.get(PROJECT_ENV) or os.getcwd()
    had = (Path(root).expanduser() / META_DIR / META_FILE).is_file()
    project = Project.init(root, title=args.title)
    word = "already a project" if had else "new project"
    make_console().print(
        f"{project.root}: {word} {project.title!r} (id {project.project_id})", soft_wrap=True
    )
    return EXIT_OK


def cmd_summarize(args: argparse.Namespace) -> int:
    from nw import Project
    from nw.cli.render import jobs_table
    from nw.jobs import summarize

    roots = args.roots or [args.project or os.environ.get(PROJECT_ENV) or os.getcwd()]
    projects = [Project(root) for root in roots]
    rows = []
    for project in projects:
        for job in summarize(project, limit=args.limit, status=args.status):
            rows.append({**job_dict(job), "project": str(project.root)})
    if args.json:
        print_json(rows)
        return EXIT_OK
    console = make_console()
    for project in projects:
        jobs = [r for r in rows if r["project"] == str(project.root)]
        if jobs:
            title = f"{project.root} — {len(jobs)} job(s)"
            console.print(jobs_table(jobs, title=title, width=console.width))
        else:
            console.print(f"{project.root}: no jobs")
    return EXIT_OK


def cmd_worker(args: argparse.Namespace) -> int:
    worker = optional_module("nw.jobs.execution.worker", "the worker", extra="")
    return int(worker.serve(args) or 0)


def cmd_db_migrate(args: argparse.Namespace) -> int:
    url = args.database_url or os.environ.get("NW_JOBS_DATABASE_URL")
    if not url:
        raise UserError("db migrate needs --database-url or NW_JOBS_DATABASE_URL")
    postgres = optional_module("nw.jobs.stores.postgres", "db migrate", extra="postgres")
    applied = postgres.migrate(url)
    if applied:
        make_console().print("applied: " + ", ".join(applied))
    else:
        make_console().print("the schema is up to date")
    return EXIT_OK
