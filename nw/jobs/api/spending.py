"""The cost calls that write nothing: ``estimate`` (the dry-run gate) and
``spend`` (committed spend, the project's or an actor's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nw.errors import InvalidType
from nw.jobs.api import accuracy, budgets, costing
from nw.jobs.api.costing import quote_for
from nw.jobs.api.handles import ProjectLike, reader
from nw.jobs.core import ids
from nw.jobs.core.checks import check_name, check_params
from nw.jobs.core.model import (
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
    and ``quote`` is None. Unknown cost always requires approval.

    Beside them: ``approval_mode`` (``advisory`` or ``required``, the stored
    approval policy, whose threshold, when stored, is the one used), and
    ``accuracy``: the kind's recent quote-against-bill figure
    (``{jobs, median_ratio, over_usd, warning}``, ``warning`` a sentence when
    recent actuals ran more than 20% above their quotes; None without
    enough history). The quote itself is never adjusted. Raises
    ``InvalidValue`` (a ``ValueError``) on malformed ``units``, like ``enqueue``.
    """
    if not isinstance(params, Mapping):
        raise InvalidType(f"params must be a dict, not {type(params).__name__}")
    check_name(kind, "kind")
    check_params(ids.check_json_params({k: v for k, v in params.items() if k != "plan"}))
    ids.check_units(params)
    proj = as_project(project)
    quote = quote_for(proj, kind, dict(params), config, for_estimate=True)
    out = quote.as_estimate(config)
    store, _ = reader(proj, config)  # the stored policy and the kind's recent bills
    policy = budgets.policy_of(store)
    threshold = policy.threshold(config)
    needs = policy.requires_approval(quote.estimated_usd, config)
    out.update(approval_threshold_usd=threshold, requires_approval=needs)
    out["approval_mode"] = policy.mode
    out["accuracy"] = accuracy.drift_of(store, kind, config.clock())
    return out


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
    ``remaining_usd`` lower). ``budgets``: the stored budgets that count it,
    each as ``list_budgets`` shows it (spent of cap in its own window)."""
    store, _ = reader(as_project(project), config)
    if actor is None:
        totals = store.spend() if store is not None else costing.NO_SPEND
        return {**costing.spend_view(totals, config), "budgets": _stored(project, None, config)}
    if not isinstance(actor, str) or not actor:
        raise InvalidType("actor must be a non-empty id string")
    check_name(actor, "actor")
    since = config.clock() - config.actor_budget_window_s
    totals = store.spend(actor_id=actor, since=since) if store is not None else costing.NO_SPEND
    view = costing.spend_view(totals, config, cap=config.actor_budget_usd)
    stored = _stored(project, actor, config)
    return {**view, "actor": actor, "window_s": config.actor_budget_window_s, "budgets": stored}


def _stored(project: ProjectLike, actor: str | None, config: JobsConfig) -> list[dict[str, Any]]:
    """The stored budgets that count this spend (``budgets.list_budgets``): all
    of them, or those over every actor or this one."""
    rows = budgets.list_budgets(project, config=config)
    return rows if actor is None else [b for b in rows if b["actor"] in (None, actor)]
