"""How a job reads on a terminal: plain text for pipes, rich renderables for a TTY.

Everything here takes the JSON contract (``nw.jobs.to_dict``), never a ``Job``,
so the table, the plain line and ``--json`` all show the same data. The cost
rule is the one the seed insists on: a lower bound reads ``≥ $x``, an unknown
reads ``unknown``, and neither ever reads ``$0``. The web tray's ``tray.js``
mirrors these rules; keep the two in step.

Job data is shown as text, never obeyed: every string from a job (its label,
kind, actor, stage, error, params, a worker's host) reaches a renderable as a
``rich.text.Text`` (no markup, no emoji codes), and each control character in
it (ESC, BEL, C1, a bidirectional override, a lone surrogate) reads as its
escape (``nw.canonical.escaped``: ``\\x1b``), so a label cannot move the
cursor, set the title, write the clipboard or crash a command. Rows stored
before the input checks existed are shown the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.protocol import is_renderable
from rich.table import Table
from rich.text import Text

from nw.canonical import CONTROL, escaped

ESTIMATING = "estimating…"
STATUS_STYLE = {
    "queued": "grey62",
    "running": "bold cyan",
    "cancelling": "magenta",
    "succeeded": "green",
    "failed": "red",
    "cancelled": "blue",
    "worker lost": "bold yellow",
}
WORKER_LOST = "worker lost"
GRADE_STYLE = {"ok": "green", "notice": "blue", "warning": "yellow", "error": "bold red"}
LIVE = ("queued", "running", "cancelling")


def text(value: Any, style: str = "") -> Text:
    """Data as a renderable: plain text (never markup), control characters escaped."""
    return Text(escaped(str(value)), style=style)


def cell(value: Any) -> Any:
    """A table cell: a string (data, or built from it) as ``text``; a renderable as is."""
    if value is None:
        return Text("—")
    return text(value) if isinstance(value, str) or not is_renderable(value) else value


def _json_escape(found: Any) -> str:
    char = found.group()  # a newline here is the indentation's: json escapes its own
    return char if char == "\n" else f"\\u{ord(char):04x}"


def shown_json(value: Any, *, indent: int | None = 2) -> str:
    """``value`` as JSON for a terminal or a pipe: non-ASCII kept readable, each
    control character (C1, DEL, a bidirectional override, a lone surrogate,
    which ``json.dumps`` leaves raw) written as its ``\\uXXXX`` escape. Still JSON,
    and always encodable."""
    raw = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
    return CONTROL.sub(_json_escape, raw)


def usd(value: float) -> str:
    return f"${value:.3f}" if 0 < abs(value) < 0.01 else f"${value:.2f}"


def cost_text(job: Mapping[str, Any]) -> str:
    """The job's spend with its honesty flag.

    A reported actual wins; a flagged one is a lower bound (``≥``), and a
    flagged zero is not a number at all (``unknown``). With no actual yet,
    the estimate is shown as one (``est.``), and a missing estimate is
    ``unknown``.
    """
    cost = job.get("cost") or {}
    actual, lower = cost.get("actual_usd"), cost.get("actual_is_lower_bound")
    if actual is not None:
        if lower:
            return "unknown" if actual <= 0 else f"≥ {usd(actual)}"
        return f"{usd(actual)} cached" if job.get("cached") else usd(actual)
    if lower:
        return "unknown"
    estimated = cost.get("estimated_usd")
    if estimated is None:
        return "unknown"
    return f"est. {usd(estimated)}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(float(seconds), 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s" if seconds < 10 else f"{round(seconds)}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{seconds / 3600:.1f}h"


def eta_text(job: Mapping[str, Any]) -> str:
    """Remaining time and how much to trust it; ``estimating…`` for a bare prior."""
    status = job.get("status")
    if status not in LIVE:
        return f"took {duration(job.get('elapsed_s'))}" if job.get("elapsed_s") else "—"
    confidence = job.get("confidence")
    if confidence == "prior" or job.get("label_hint") == ESTIMATING or confidence is None:
        return ESTIMATING
    eta = job.get("eta_s")
    if eta is None:
        return ESTIMATING
    if status == "queued" and job.get("starts_at"):  # eta_s counts the wait
        return f"~{duration(eta)} to done ({confidence})"
    if status == "queued":
        return f"~{duration(eta)} once running ({confidence})"
    hint = job.get("label_hint")
    if hint == "taking longer than usual":
        return f"{hint} ({confidence})"
    return f"~{duration(eta)} left ({confidence})"


def stage_text(job: Mapping[str, Any]) -> str:
    progress = job.get("progress") or {}
    index, count = progress.get("stage_index"), progress.get("stage_count")
    name = progress.get("current_transform")
    parts = []
    if name:
        parts.append(str(name))
    if isinstance(index, int) and isinstance(count, int) and count > 0:
        parts.append(f"{index} of {count} done")  # stage_index = stages finished
    return " · ".join(parts) or "—"


def pct_text(job: Mapping[str, Any]) -> str:
    pct = job.get("pct")
    return "—" if pct is None else f"{pct:.0f}%"


def outcome_text(job: Mapping[str, Any]) -> str:
    """What a finished job has to say: its error, its artifact, or a cache hit."""
    if job.get("error"):
        return str(job["error"])
    if job.get("cached"):
        saved = (job.get("cost") or {}).get("cache_hit_savings_usd")
        return f"cache hit, saved {usd(saved)}" if saved else "cache hit"
    if job.get("artifact_ref"):
        return str(job["artifact_ref"])
    return ""


def state_text(job: Mapping[str, Any]) -> str:
    """The status, or "worker lost" for a live job whose worker the liveness
    predicate says is dead (it is about to be requeued or failed), or what
    holds a queued job ("waiting: fal:kling at 2 of 2", "starts in 40s"), or
    what a parked one waits on ("waiting on fal, 3rd in queue")."""
    status = str(job.get("status"))
    if status in ("running", "cancelling") and job.get("worker_responsive") is False:
        return WORKER_LOST
    if status == "queued" and job.get("waiting"):
        return str(job["waiting"])
    if status == "running" and job.get("parked") and job.get("waiting"):
        return str(job["waiting"])  # parked on a provider: "waiting on fal, 3rd in queue"
    return status


def short_id(job_id: str) -> str:
    return job_id[:12]


def pipeline_text(job: Mapping[str, Any]) -> str:
    """`` (step S of pipeline P)`` for a pipeline's step (``nw-jobs pipeline show P``)."""
    if not job.get("pipeline_id"):
        return ""
    return f" (step {job.get('step')} of {job['pipeline_id']})"


def plain_line(job: Mapping[str, Any]) -> str:
    """One line for logs and pipes (no colour, no bar)."""
    bits = [
        f"{short_id(job['job_id'])}",
        f"{job.get('label') or job.get('kind')}",
        state_text(job),
        pct_text(job),
        eta_text(job),
        f"stage {stage_text(job)}",
        f"cost {cost_text(job)}",
    ]
    if job.get("grade"):
        bits.append(f"grade {job['grade']}")
    outcome = outcome_text(job)
    if outcome and job.get("status") not in LIVE:
        bits.append(outcome)
    if job.get("pipeline_id"):
        bits.append(pipeline_text(job).strip(" ()"))
    return escaped(" | ".join(bits))


def status_cell(job: Mapping[str, Any]) -> Text:
    status = state_text(job)
    plain = STATUS_STYLE.get(str(job.get("status")), "")  # a waiting job is styled as queued
    style = GRADE_STYLE.get(job.get("grade") or "", STATUS_STYLE.get(status, plain))
    return text(status, style=style)


def bar(job: Mapping[str, Any], width: int = 24) -> ProgressBar | Text:
    status = job.get("status")
    pct = job.get("pct")
    if status in LIVE:
        if pct is None:
            # No honest percentage yet: a pulsing bar, not a made-up number.
            return ProgressBar(total=None, width=width, pulse=True)
        return ProgressBar(
            total=100, completed=pct, width=width, complete_style="cyan", finished_style="cyan"
        )
    style = GRADE_STYLE.get(job.get("grade") or "", "")
    return ProgressBar(
        total=100,
        completed=100 if status == "succeeded" else (pct or 0),
        width=width,
        complete_style=style or "bar.complete",
        finished_style=style or "bar.finished",
    )


@dataclass(frozen=True)
class _Column:
    name: str
    cell: Callable[[Mapping[str, Any]], Any]
    min: int
    max: int
    priority: int
    """Lower keeps its place longer when the terminal is narrow."""
    grows: int
    """Lower gets spare width first."""
    justify: str = "left"
    style: str = ""
    wraps: bool = False
    """Its text wraps onto more lines rather than being cut: what it says
    (why a job waits, how long it has left) is worth a taller row."""


# The id stays at 80 columns and in a pipe (it is what show, cancel and retry
# take); progress, %, stage and the note give way first.
_COLUMNS = (
    _Column("id", lambda j: short_id(j["job_id"]), 12, 12, 1, 9, style="dim"),
    _Column("job", lambda j: (j.get("label") or j["kind"]) + pipeline_text(j), 14, 32, 0, 1),
    _Column("status", status_cell, 10, 16, 2, 1, wraps=True),
    _Column("progress", lambda j: bar(j, width=16), 16, 16, 5, 9),
    _Column("%", pct_text, 4, 4, 6, 9, justify="right"),
    _Column("ETA", eta_text, 14, 22, 4, 2, wraps=True),
    _Column("stage", stage_text, 10, 20, 7, 3),
    _Column("cost", cost_text, 12, 13, 3, 0, justify="right"),
    _Column("note", lambda j: _note(j), 12, 60, 8, 4, style="dim", wraps=True),
)
_PER_COLUMN = 3  # padding either side and a separator; the edges make it 3n - 1 in all


def jobs_table(
    jobs: Iterable[Mapping[str, Any]],
    *,
    title: str | None = None,
    width: int = 160,
    show_id: bool = True,
) -> Table:
    """The jobs as a table that fits ``width`` columns: on a narrow terminal the
    note, the id and the stage give way before status, progress, ETA and cost."""
    candidates = [c for c in _COLUMNS if show_id or c.name != "id"]
    chosen: list[_Column] = []
    for column in sorted(candidates, key=lambda c: c.priority):
        needed = sum(c.min + _PER_COLUMN for c in [*chosen, column]) - 1
        if needed <= width:
            chosen.append(column)
    spare = width + 1 - sum(c.min + _PER_COLUMN for c in chosen)
    widths = {c.name: c.min for c in chosen}
    for column in sorted(chosen, key=lambda c: c.grows):
        grow = min(column.max - column.min, max(spare, 0))
        widths[column.name] += grow
        spare -= grow
    shown = [c for c in candidates if c in chosen]
    noted = any(c.name == "note" for c in shown)
    table = Table(
        title=None if title is None else text(title),
        box=box.SIMPLE_HEAVY,
        title_justify="left",
        pad_edge=False,
    )
    for column in shown:
        table.add_column(
            column.name,
            width=widths[column.name],
            no_wrap=not column.wraps,
            overflow="fold" if column.wraps else "ellipsis",
            justify=column.justify,  # type: ignore[arg-type]
            style=column.style,
        )
    for job in jobs:
        cells = [cell(column.cell(job)) for column in shown]
        if not noted and _note(job):  # no room for the note: the status says why it ended
            at = next(i for i, c in enumerate(shown) if c.name == "status")
            cells[at] = Text.assemble(cells[at], text(f": {_note(job)}", style="dim"))
        table.add_row(*cells)
    return table


def _note(job: Mapping[str, Any]) -> str:
    return outcome_text(job) if job.get("status") not in LIVE else ""


def when_text(value: str | None) -> str:
    if not value:
        return "—"
    try:
        return datetime.fromisoformat(value).astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return value


_SECRET_KEY = ("secret", "token", "password", "api_key", "apikey", "credential")


def shown_params(value: Any) -> Any:
    """Params as ``show`` prints them: secrets never travel in params (they come
    from the worker's environment), and a key that names one is masked anyway."""
    if isinstance(value, Mapping):
        return {
            k: "***" if any(s in str(k).lower() for s in _SECRET_KEY) else shown_params(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [shown_params(v) for v in value]
    return value


def _json_text(value: Any) -> Text:
    return Text(shown_json(value))


def cost_lines(job: Mapping[str, Any], quote: Mapping[str, Any] | None = None) -> list[str]:
    """The cost in full: estimate, actual with its honesty flag, cache savings, the quote."""
    cost = job.get("cost") or {}
    estimated, actual = cost.get("estimated_usd"), cost.get("actual_usd")
    lower: Any = cost.get("actual_is_lower_bound")
    lines = [f"estimated {'unknown' if estimated is None else usd(estimated)}"]
    if actual is None:
        lines.append("actual not reported" + (" (an unknown cost was billed)" if lower else ""))
    else:
        flag = {True: "a lower bound: an unpriced call billed", False: "exact"}.get(
            lower, "exactness not reported"
        )
        lines.append(f"actual {usd(actual)} ({flag})")
    saved = cost.get("cache_hit_savings_usd")
    if saved:
        lines.append(f"cache saved {usd(saved)}")
    if quote:
        frozen, today = quote.get("as_of_total_usd"), quote.get("total_usd")
        lines.append(
            f"plan quote: {'unknown' if frozen is None else usd(frozen)} when written (as_of),"
            f" {'unknown' if today is None else usd(today)} at today's rates"
            f" ({quote.get('status')})"
        )
    return lines


def job_detail(
    job: Mapping[str, Any],
    trail: Sequence[Mapping[str, Any]] | None = None,
    *,
    quote: Mapping[str, Any] | None = None,
) -> Group:
    """``nw-jobs show``: what a person asks about a job, then its attempts, its
    progress trail, its params and result."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    actor = job.get("actor") or {}
    live = job.get("status") in LIVE
    rows: list[tuple[str, Any]] = [
        ("id", job["job_id"]),
        ("label", job.get("label")),
        ("kind", job.get("kind")),
        ("pipeline", pipeline_text(job).strip(" ()") or None),
        ("actor", " ".join(filter(None, [actor.get("id"), actor.get("handle")])) or None),
        ("status", status_cell(job)),
        ("grade", Text(job.get("grade") or "—", style=GRADE_STYLE.get(job.get("grade") or "", ""))),
        ("progress", Group(bar(job, width=30), Text(pct_text(job)))),
        ("ETA", eta_text(job)) if live else ("ran", duration(job.get("elapsed_s"))),
        ("stage", stage_text(job)),
        ("cost", Text("\n".join(map(escaped, cost_lines(job, quote))))),
        ("created", when_text(job.get("created_at"))),
        ("started", when_text(job.get("started_at"))),
        ("finished", when_text(job.get("finished_at"))),
        ("queue wait", duration(job.get("queue_wait_s"))),
        ("attempt", f"{job.get('attempt')} of {job.get('max_attempts')}"),
    ]
    if live and job.get("predicted_total_s") is not None:
        rows.append(("predicted", f"{duration(job['predicted_total_s'])} in all"))
    if job.get("error"):
        kind = f" ({job['error_kind']})" if job.get("error_kind") else ""
        rows.append(("error", text(f"{job['error']}{kind}", style="red")))
    if job.get("error_detail") is not None:
        rows.append(("error detail", _json_text(job["error_detail"])))
    if job.get("artifact_ref"):
        rows.append(("artifact", job["artifact_ref"]))
    if job.get("worker_silent_s") is not None:
        rows.append(("worker silent", duration(job["worker_silent_s"])))
    for name, value in rows:
        grid.add_row(name, cell(value))
    parts: list[Any] = [grid]
    attempts = job.get("attempts") or []
    if attempts:
        table = Table(title="attempts", box=box.SIMPLE, title_justify="left")
        for name in ("#", "worker", "started", "ended", "why", "error"):
            table.add_column(name, overflow="fold")
        for a in attempts:
            where = f"{a.get('host') or '?'} pid {a.get('pid') or '?'}"
            table.add_row(
                *map(
                    cell,
                    (
                        str(a.get("attempt")),
                        where,
                        when_text(a.get("started_at")),
                        when_text(a.get("ended_at")),
                        a.get("ended") or "running",
                        a.get("error") or "",
                    ),
                )
            )
        parts.append(table)
    if trail:
        steps = Table(title="progress trail", box=box.SIMPLE, title_justify="left")
        steps.add_column("time", style="dim")
        steps.add_column("%", justify="right")
        steps.add_column("stage")
        steps.add_column("message", overflow="fold")
        for beat in trail:
            ts = beat.get("ts")
            when = datetime.fromtimestamp(ts).strftime("%H:%M:%S") if ts else "—"
            pct = beat.get("pct")
            stage = stage_text({"progress": beat.get("stage") or {}})
            pct_shown = "—" if pct is None else f"{pct:.0f}"
            steps.add_row(*map(cell, (when, pct_shown, stage, str(beat.get("message") or ""))))
        parts.append(steps)
    parts.append(Text("params", style="bold"))
    parts.append(_json_text(shown_params(job.get("params") or {})))
    if job.get("result") is not None:
        parts.append(Text("result", style="bold"))
        parts.append(_json_text(job["result"]))
    return Group(*parts)
