"""Subcommands about cost and throttling: ``estimate``, ``spend``, ``limits``."""

from __future__ import annotations

import argparse

from nw.cli.common import (
    EXIT_OK,
    UserError,
    import_modules,
    make_console,
    params_from,
    print_json,
    project_from,
)


def cmd_limits(args: argparse.Namespace) -> int:
    """List the limits, set one (``set KEY --max-running N --per-second N``) or
    remove one (``remove KEY``)."""
    from nw.jobs import list_limits, set_limit

    project = project_from(args)
    if args.action in ("set", "remove") and not args.key:
        raise UserError(f"nw-jobs limits {args.action} needs a KEY")
    if args.action == "set":
        if args.max_running is None and args.per_second is None:
            raise UserError("nw-jobs limits set needs --max-running and/or --per-second")
        set_limit(project, args.key, max_running=args.max_running, per_second=args.per_second)
    elif args.action == "remove":
        if args.key not in {limit["key"] for limit in list_limits(project)}:
            raise UserError(f"no limit on key {args.key!r} to remove (nw-jobs limits lists them)")
        set_limit(project, args.key)
    elif args.key or args.max_running is not None or args.per_second is not None:
        raise UserError("nw-jobs limits (list) takes no KEY or caps; use set or remove")
    rows = list_limits(project)
    if args.json:
        print_json(rows)
        return EXIT_OK
    console = make_console()
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


def cmd_estimate(args: argparse.Namespace) -> int:
    from nw.jobs import estimate
    from nw.jobs.core.kinds import registered_kinds

    project = project_from(args)
    import_modules(args.imports or ())
    params = params_from(args.params)
    known = registered_kinds()
    if args.kind not in known:
        raise UserError(
            f"unknown kind {args.kind!r}; known kinds: {', '.join(known) or 'none'}"
            " (--import MODULE registers a module's kinds)"
        )
    if params.get("plan") is not None:
        from nw.errors import PlanError
        from nw.jobs.api.costing import with_plan_dict

        try:
            with_plan_dict(params)
        except PlanError as exc:  # why, in one line (the facade would log it and say "unknown")
            raise UserError(f"params['plan'] cannot be read as a plan: {exc}") from None
    result = estimate(project, args.kind, params)
    if args.json:
        print_json(result)
        return EXIT_OK
    from nw.cli.render import usd

    console = make_console()
    cost = result.get("estimated_usd")
    shown = "unknown" if cost is None else usd(cost)
    if cost is not None and result.get("has_unknown_costs"):
        shown = f"≥ {shown}"
    console.print(f"{args.kind}: estimated cost {shown}")
    gate = "requires approval" if result.get("requires_approval") else "within the approval limit"
    console.print(f"{gate} (threshold {usd(result['approval_threshold_usd'])})")
    if result.get("reason"):
        console.print(str(result["reason"]))
    if result.get("approval_mode") == "required" and result.get("requires_approval"):
        console.print("the approval policy is required: enqueue it with --approved")
    warning = (result.get("accuracy") or {}).get("warning")
    if warning:  # the quote stands; this says how recent bills compared with quotes
        from rich.text import Text

        console.print(Text(f"note: {warning}"))
    return EXIT_OK


def cmd_spend(args: argparse.Namespace) -> int:
    from nw.cli.project_views import totals_view
    from nw.jobs import spend, totals

    project = project_from(args)
    data = {**totals(project), "committed": spend(project)}
    if args.json:
        print_json(data)
        return EXIT_OK
    make_console().print(totals_view(data, title=f"{project.title} — spend and counts"))
    return EXIT_OK
