"""``nw-jobs pipeline``: run a pipeline from a JSON file (its steps), show one
(by its id or one of its jobs'), estimate, cancel, retry."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from nw.cli.common import (
    EXIT_OK,
    UserError,
    import_modules,
    json_file,
    make_console,
    print_json,
    project_from,
    resolve_id,
)

ACTIONS = ("run", "show", "estimate", "cancel", "retry")


def add_parsers(add: Callable[..., argparse.ArgumentParser], parents: list) -> None:
    """Register ``pipeline`` on the ``nw-jobs`` parser (``add`` as parser.py's)."""
    p = add(
        "pipeline",
        cmd_pipeline,
        "steps that wait on each other: run FILE (JSON steps, - for stdin), show ID"
        " (a pipeline's or one of its jobs'), estimate FILE, cancel ID, retry ID",
        parents,
    )
    p.add_argument("action", choices=ACTIONS)
    p.add_argument("target", help="a JSON file of steps (run, estimate) or a pipeline id")
    p.add_argument("--label", help="run: the pipeline's label")
    p.add_argument("--actor", help="run: who asked (an actor id)")
    p.add_argument("--approved", action="store_true", help="run: approve its cost")


def _steps(target: str) -> Any:
    spec = json_file(target, "steps file")
    if isinstance(spec, dict) and isinstance(spec.get("steps"), dict):
        return spec["steps"]  # {"steps": {...}} or the steps themselves
    return spec


def _pipeline_id(project: Any, target: str) -> str:
    if target.startswith("pl-"):
        return target
    from nw.jobs import get_job

    job = get_job(project, resolve_id(project, target))
    if job is None or job.pipeline_id is None:
        raise UserError(f"job {target} is no pipeline's step")
    return job.pipeline_id


def cmd_pipeline(args: argparse.Namespace) -> int:
    from nw.jobs.api import pipeline_retry, pipelines

    import_modules(args.imports or ())
    project = project_from(args)
    if args.action == "run":
        got = pipelines.enqueue_pipeline(
            project,
            _steps(args.target),
            label=args.label,
            actor=args.actor,
            approved=args.approved,
        )
    elif args.action == "estimate":
        quoted = pipelines.estimate_pipeline(project, _steps(args.target))
        if args.json:
            print_json(quoted)
        else:
            _say(estimate_lines(quoted))
        return EXIT_OK
    else:
        pid = _pipeline_id(project, args.target)
        call = {
            "show": pipelines.get_pipeline,
            "cancel": pipelines.cancel_pipeline,
            "retry": pipeline_retry.retry_pipeline,
        }[args.action]
        found = call(project, pid)
        if found is None:
            raise UserError(f"no pipeline {pid}")
        got = found
    if args.json:
        print_json(got.to_dict())
    else:
        _say(pipeline_lines(got))
    return EXIT_OK


def _say(lines: list[str]) -> None:
    from rich.text import Text

    from nw.canonical import escaped

    console = make_console()
    for line in lines:
        console.print(Text(escaped(line)), soft_wrap=True)  # never read as markup


def _money(quote: dict[str, Any]) -> str:
    usd = quote.get("estimated_usd")
    if usd is None:
        return "unknown"
    return ("≥ " if quote.get("lower_bound") else "") + f"${usd:.2f}"


def estimate_lines(quoted: dict[str, Any]) -> list[str]:
    from nw.cli.render import duration

    head = f"pipeline {quoted['pipeline_id']}: {_money(quoted)}, ETA {duration(quoted['eta_s'])}"
    if quoted.get("eta_confidence"):
        head += f" ({quoted['eta_confidence']})"
    if quoted.get("requires_approval"):
        head += " (needs approval)"
    return [head] + [
        f"  {name}: {s['kind']}, {_money({'estimated_usd': s['estimated_usd']})}"
        for name, s in quoted["steps"].items()
    ]


def pipeline_lines(p: Any) -> list[str]:
    from nw.cli.render import duration, state_text

    eta = "" if p.is_terminal else f", ETA {duration(p.eta_s)}"
    if p.eta_confidence and not p.is_terminal:
        eta += f" ({p.eta_confidence})"
    lines = [
        f"pipeline {p.pipeline_id}{' ' + p.label if p.label else ''}: {p.status}, "
        f"{p.pct:.0f}% of {len(p.steps)} steps, quote {_money(p.quote)}, "
        f"spent ${p.actual_usd:.2f}{eta}"
    ]
    for s in p.steps:
        job = s.job
        state = state_text({"status": job.status.value, "waiting": job.waiting})
        after = f" after {', '.join(s.after)}" if s.after and not job.waiting else ""
        error = f": {job.error}" if job.error and job.status.value != "succeeded" else ""
        lines.append(f"  {s.name} [{job.job_id[:12]}] {job.kind} {state}{after}{error}")
    return lines
