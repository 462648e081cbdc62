"""``nw-jobs budget``: the stored spend policy (``set``, ``list``, ``remove``,
``approval``), and ``nw-jobs spend --accuracy`` (quote against bill)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from nw.cli.common import EXIT_OK, UserError, make_console, print_json, project_from

PERIODS = ("day", "week", "month")


def _shown(value: Any) -> str:
    """A stored name as plain, one-line text (escape codes and controls made visible)."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in str(value))


def _print(console: Any, line: str) -> None:
    from rich.text import Text

    console.print(Text(line), soft_wrap=True)  # Text: never read as markup


def _money(usd: float | None) -> str:
    from nw.cli.render import usd as money

    return "—" if usd is None else money(usd)


def add_parsers(add: Callable[..., argparse.ArgumentParser], parents: list) -> None:
    """Register ``budget`` on the ``nw-jobs`` parser (``add`` as parser.py's)."""
    p = add(
        "budget",
        cmd_budget,
        "spend budgets kept with the project (all doors obey them): list, set USD, remove;"
        " approval --mode required|advisory",
        parents,
    )
    p.add_argument(
        "action", nargs="?", choices=("list", "set", "remove", "approval"), default="list"
    )
    p.add_argument("usd", nargs="?", type=float, help="set: the cap in dollars")
    p.add_argument("--per", choices=PERIODS, help="a calendar window in UTC (default: all time)")
    p.add_argument("--actor", help="only this actor id's jobs")
    p.add_argument("--kind", help="only this kind's jobs")
    p.add_argument("--threshold", type=float, help="approval: the threshold in dollars")
    p.add_argument(
        "--mode", choices=("advisory", "required"), help="approval: advisory or required"
    )


def add_accuracy_options(p: argparse.ArgumentParser, cmd_spend: Callable) -> None:
    """``nw-jobs spend --accuracy [--by kind|model]`` over the existing ``spend``."""
    p.add_argument(
        "--accuracy", action="store_true", help="what jobs were billed against their quotes"
    )
    p.add_argument("--by", choices=("kind", "model"), default="kind", help="with --accuracy")

    def cmd(args: argparse.Namespace) -> int:
        return cmd_accuracy(args) if args.accuracy else cmd_spend(args)

    p.set_defaults(func=cmd)


def cmd_budget(args: argparse.Namespace) -> int:
    from nw.jobs import get_approval, list_budgets, remove_budget, set_approval, set_budget

    project = project_from(args)
    scope = {"per": args.per, "actor": args.actor, "kind": args.kind}
    if args.action != "approval" and (args.threshold is not None or args.mode is not None):
        raise UserError("--threshold and --mode belong to nw-jobs budget approval")
    if args.action == "set":
        if args.usd is None:
            raise UserError("nw-jobs budget set needs the cap in dollars (USD)")
        set_budget(project, args.usd, **scope)
    elif args.action == "remove":
        if args.usd is not None:
            raise UserError("nw-jobs budget remove takes no USD; name it by --per/--actor/--kind")
        if not remove_budget(project, **scope):
            raise UserError(f"no such budget ({_scope_text(scope)})")
    elif args.action == "approval":
        if args.usd is not None or any(v is not None for v in scope.values()):
            raise UserError("nw-jobs budget approval takes only --threshold and --mode")
        if args.threshold is not None or args.mode is not None:
            now = get_approval(project)
            set_approval(
                project,
                threshold_usd=args.threshold
                if args.threshold is not None
                else now["threshold_usd"],
                mode=args.mode or now["mode"],
            )
        policy = get_approval(project)
        if args.json:
            print_json(policy)
            return EXIT_OK
        _print(
            make_console(),
            f"approval {policy['mode']} at {_money(policy['threshold_usd'])}"
            + ("" if policy["stored"] else " (not stored: the defaults)"),
        )
        return EXIT_OK
    elif args.usd is not None or any(v is not None for v in scope.values()):
        raise UserError("nw-jobs budget (list) takes no USD or scope; use set or remove")
    rows = list_budgets(project)
    if args.json:
        print_json(rows)
        return EXIT_OK
    console = make_console()
    if not rows:
        _print(console, "no budgets")
        return EXIT_OK
    for b in rows:
        at_least = "≥ " if b["is_lower_bound"] else ""
        window = f"per {b['per']} (UTC)" if b["per"] else "all time"
        _print(
            console,
            f"{_shown(b['key'])}: {at_least}{_money(b['spent_usd'])} of {_money(b['usd'])}"
            f" {window}, {_money(b['remaining_usd'])} left ({b['scope']})",
        )
    return EXIT_OK


def _scope_text(scope: dict[str, Any]) -> str:
    parts = [f"{k} {_shown(v)!s}" for k, v in scope.items() if v is not None]
    return ", ".join(parts) or "all jobs, all time"


def cmd_accuracy(args: argparse.Namespace) -> int:
    from nw.jobs import cost_accuracy

    rows = cost_accuracy(project_from(args), by=args.by)
    if args.json:
        print_json(rows)
        return EXIT_OK
    console = make_console()
    if not rows:
        _print(console, "no finished job was both quoted and billed yet")
        return EXIT_OK

    def ratio(x: float | None) -> str:
        return "—" if x is None else f"{x:.2f}"

    for r in rows:
        over = r["over_usd"]
        way = "over" if over > 0 else "under"
        _print(
            console,
            f"{_shown(r[args.by])}: {r['jobs']} jobs,"
            f" billed/quoted median {ratio(r['median_ratio'])}"
            f" (middle half {ratio(r['p25_ratio'])}–{ratio(r['p75_ratio'])}),"
            f" {_money(abs(over))} {way} ({_money(r['billed_usd'])} billed of"
            f" {_money(r['quoted_usd'])} quoted)",
        )
    return EXIT_OK
