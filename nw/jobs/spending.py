"""The cost calls that write nothing: ``estimate`` (the dry-run gate) and
``spend`` (committed spend, the project's or an actor's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nw.errors import InvalidType
from nw.jobs import costing, ids
from nw.jobs.checks import check_name, check_params
from nw.jobs.costing import quote_for
from nw.jobs.handles import ProjectLike, _reader
from nw.jobs.model import (
    DEFAULT_CONFIG,
    JobsConfig,
)
from nw.project import as_project


def estimate(
    project: ProjectLike,
    kind: str,
    params: Mapping[str, Any],
    *,
    config: JobsConfig = DEFAULT_CONFIG,
) -> dict[str, Any]:
    """Dry-run cost gate: ``{estimated_usd, has_unknown_costs, approval_threshold_usd,
    requires_approval, quote}``; writes nothing.

    With ``params["plan"]`` (a dict or a live ``falaw.Plan``) the plan is
    re-quoted at today's rates and ``quote`` is ``nw.pricing.PlanQuote`` as a
    dict plus ``caller_estimated_usd`` (what ``params["estimated_usd"]`` said,
    reported, never used). A plan that cannot be read gives
    ``estimated_usd: None`` and ``reason: UNREADABLE_PLAN_REASON`` (the error
    goes to the log). Without a plan the estimate is ``params["estimated_usd"]``
    and ``quote`` is None. Unknown cost always requires approval. Raises
    ``InvalidValue`` (a ``ValueError``) on malformed ``units``, like ``enqueue``.
    """
    if not isinstance(params, Mapping):
        raise InvalidType(f"params must be a dict, not {type(params).__name__}")
    check_name(kind, "kind")
    check_params(ids.check_json_params({k: v for k, v in params.items() if k != "plan"}))
    ids.check_units(params)
    quote = quote_for(as_project(project), kind, dict(params), config, for_estimate=True)
    return quote.as_estimate(config)


def spend(
    project: ProjectLike, *, actor: str | None = None, config: JobsConfig = DEFAULT_CONFIG
) -> dict[str, Any]:
    """The project's committed spend (or one actor's); writes nothing.

    With ``actor`` (an id): that actor's jobs created in the last
    ``config.actor_budget_window_s``, against ``config.actor_budget_usd``
    (``budget_usd`` and ``remaining_usd`` are the actor's; ``window_s`` says
    the window).

    ``{actual_usd, live_estimated_usd, total_usd, live_unknown_count,
    is_lower_bound, budget_usd, remaining_usd}``: the actual spend of finished
    jobs plus the estimates of live ones. ``is_lower_bound`` is True when a
    finished job's actual is a lower bound or was never reported, or a live
    job's estimate is unknown: the real total may be higher (and
    ``remaining_usd`` lower)."""
    store, _ = _reader(as_project(project), config)
    if actor is None:
        totals = store.spend() if store is not None else costing.NO_SPEND
        return costing.spend_view(totals, config)
    if not isinstance(actor, str) or not actor:
        raise InvalidType("actor must be a non-empty id string")
    check_name(actor, "actor")
    since = config.clock() - config.actor_budget_window_s
    totals = store.spend(actor_id=actor, since=since) if store is not None else costing.NO_SPEND
    view = costing.spend_view(totals, config, cap=config.actor_budget_usd)
    return {**view, "actor": actor, "window_s": config.actor_budget_window_s}
