"""How the project as a whole reads on a terminal: its spend and counts
(``nw-jobs spend``) and its workers (``nw-jobs workers``), shown as
``nw.cli.render`` shows a job's data (as text, never obeyed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from nw.cli.render import cell, short_id, text, usd, when_text


def totals_view(data: Mapping[str, Any], *, title: str | None = None) -> Group:
    """``nw-jobs spend``: today and this week by kind and actor, then the counts."""
    parts: list[Any] = []
    if title:
        parts.append(text(title, style="bold"))
    spend = data.get("spend") or {}
    for window, name in (("today", "today (UTC)"), ("week", "the last 7 days")):
        got = spend.get(window) or {}
        figure = usd(float(got.get("usd") or 0.0))
        parts.append(Text(f"{name}: {'≥ ' if got.get('lower_bound') else ''}{figure}"))
        table = Table(box=box.SIMPLE, show_header=True, pad_edge=False)
        table.add_column("by")
        table.add_column("name")
        table.add_column("spent", justify="right")
        for by in ("kind", "actor"):
            for key, value in sorted((got.get(f"by_{by}") or {}).items()):
                table.add_row(by, text(key), usd(float(value)))
        if table.row_count:
            parts.append(table)
    committed = data.get("committed")
    if committed:
        line = f"committed (what a budget counts): {usd(float(committed['total_usd']))}"
        if committed.get("budget_usd") is not None:
            line += f" of {usd(float(committed['budget_usd']))}"
        parts.append(Text(line))
    counts = data.get("counts") or {}
    for name in ("by_status", "by_grade"):
        got = counts.get(name) or {}
        said = ", ".join(f"{k} {v}" for k, v in sorted(got.items())) or "none"
        parts.append(Text(f"jobs {name.replace('_', ' ')}: {said}"))
    return Group(*parts)


def workers_table(workers: Iterable[Mapping[str, Any]], *, title: str | None = None) -> Table:
    """``nw-jobs workers``: each announced process, live or lately lost."""
    table = Table(
        title=None if title is None else text(title),
        box=box.SIMPLE_HEAVY,
        title_justify="left",
        pad_edge=False,
    )
    for name in ("worker", "state", "busy", "kinds", "started", "last beat", "jobs"):
        # words wrap whole (a kind is not cut mid-name); only one longer than the
        # column is folded
        table.add_column(name, overflow="fold", no_wrap=False)
    for w in workers:
        state = text(w["state"], style="green" if w["state"] == "live" else "red")
        slots = w.get("slots")
        table.add_row(
            *map(
                cell,
                (
                    f"{w.get('host') or '?'} pid {w.get('pid') or '?'}",
                    state,
                    f"{w.get('busy', 0)}/{slots}" if slots else str(w.get("busy", 0)),
                    ", ".join(map(str, w.get("kinds") or [])) or str(w.get("role") or "—"),
                    when_text(w.get("started_at")),
                    when_text(w.get("last_beat_at")),
                    " ".join(short_id(j) for j in w.get("jobs") or []) or "—",
                ),
            )
        )
    return table
