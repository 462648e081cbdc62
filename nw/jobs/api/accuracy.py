"""Quote against bill: how far what finished jobs were billed (``actual_usd``)
ran from what they were quoted (``estimated_usd``), per kind or model.

Each finished run keeps both in its record (the quote at enqueue, the actual
its body reported), so nothing new is stored: ``cost_accuracy`` reads the
newest quoted-and-billed runs and summarises them, and ``estimate`` puts the
kind's recent figure beside its quote (``drift_of``), never changing it.
A run quoted at $0 has no ratio; its dollars still count.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from nw.errors import InvalidType, InvalidValue
from nw.jobs.api.handles import ProjectLike, reader
from nw.jobs.core.model import DEFAULT_CONFIG, JobsConfig
from nw.project import as_project

BY = ("kind", "model")
#: How many of the newest runs ``cost_accuracy`` reads (per call).
MAX_RUNS = 5000
#: ``estimate`` looks at a kind's newest runs within this many seconds ...
RECENT_S = 30 * 86400.0
#: ... at most this many of them ...
RECENT_RUNS = 50
#: ... needs at least this many to say anything ...
RECENT_MIN = 3
#: ... and warns when their median actual/quote is above this.
DRIFT_RATIO = 1.2
NO_MODEL = "(unknown model)"


def model_of(row: Mapping[str, Any]) -> str:
    """A run's model: ``params["model"]``, else the applications its plan calls."""
    model = row.get("model")
    if isinstance(model, str) and model:
        return model
    calls = row.get("calls")
    if isinstance(calls, list):
        apps = sorted(
            {
                str(c["application"])
                for c in calls
                if isinstance(c, Mapping) and c.get("application")
            }
        )
        if apps:
            return "+".join(apps)
    return NO_MODEL


def summarize_runs(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """``jobs``, ``quoted_usd``, ``billed_usd``, ``over_usd`` (billed minus quoted:
    negative when under), and the ratio billed/quoted of the runs quoted above
    $0: ``median_ratio``, ``p25_ratio``, ``p75_ratio``, ``min_ratio``, ``max_ratio``."""
    quoted = sum(float(r["quoted_usd"]) for r in rows)
    billed = sum(float(r["billed_usd"]) for r in rows)
    ratios = sorted(
        float(r["billed_usd"]) / float(r["quoted_usd"]) for r in rows if float(r["quoted_usd"]) > 0
    )
    out: dict[str, Any] = {
        "jobs": len(rows),
        "quoted_usd": quoted,
        "billed_usd": billed,
        "over_usd": billed - quoted,
        "median_ratio": statistics.median(ratios) if ratios else None,
        "p25_ratio": None,
        "p75_ratio": None,
        "min_ratio": ratios[0] if ratios else None,
        "max_ratio": ratios[-1] if ratios else None,
    }
    if len(ratios) >= 2:
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        out["p25_ratio"], out["p75_ratio"] = q1, q3
    elif ratios:
        out["p25_ratio"] = out["p75_ratio"] = ratios[0]
    return out


def cost_accuracy(
    project: ProjectLike,
    *,
    by: str = "kind",
    since: float | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> list[dict[str, Any]]:
    """Per kind (or model), how the project's finished jobs were billed against
    their quotes: one row per ``kind`` (or ``model``) with ``jobs``,
    ``quoted_usd``, ``billed_usd``, ``over_usd`` (billed minus quoted), and the
    spread of billed/quoted (``median_ratio``, ``p25_ratio``, ``p75_ratio``,
    ``min_ratio``, ``max_ratio``; None when every quote was $0). Only runs
    with a number for both count (a job whose body never reported its actual
    is left out); the newest ``MAX_RUNS`` finished at or after ``since``
    (epoch seconds; None: all). Writes nothing; sorted by dollars over, most first."""
    if by not in BY:
        raise InvalidValue(f"by must be one of {', '.join(BY)}, got {by!r}")
    if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float))):
        raise InvalidType(f"since must be epoch seconds or None, not {type(since).__name__}")
    store, _ = reader(as_project(project), config)
    if store is None or not hasattr(store, "quoted_and_billed"):
        return []
    rows = store.quoted_and_billed(since=float(since or 0.0), kind=None, limit=MAX_RUNS)
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        name = str(r["kind"]) if by == "kind" else model_of(r)
        groups.setdefault(name, []).append(r)
    out = [{by: name, **summarize_runs(runs)} for name, runs in groups.items()]
    return sorted(out, key=lambda row: (-row["over_usd"], row[by]))


def drift_of(store: Any, kind: str, now: float) -> dict[str, Any] | None:
    """The kind's recent quote-against-bill figure for ``estimate``:
    ``{jobs, median_ratio, over_usd, warning}`` (``warning`` a sentence when
    the median actual ran more than 20% above the quote, else None), or None
    with fewer than ``RECENT_MIN`` recent runs."""
    if store is None or not hasattr(store, "quoted_and_billed") or not isinstance(kind, str):
        return None
    rows = store.quoted_and_billed(since=now - RECENT_S, kind=kind, limit=RECENT_RUNS)
    rows = [r for r in rows if float(r["quoted_usd"]) > 0]
    if len(rows) < RECENT_MIN:
        return None
    summary = summarize_runs(rows)
    ratio = summary["median_ratio"]
    warning = None
    if ratio is not None and ratio > DRIFT_RATIO:
        warning = (
            f"recent {kind} jobs were billed {round((ratio - 1) * 100)}% above their quotes"
            f" (median of the last {len(rows)}); this quote may be low"
        )
    return {
        "jobs": summary["jobs"],
        "median_ratio": ratio,
        "over_usd": summary["over_usd"],
        "warning": warning,
    }
