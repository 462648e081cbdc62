"""The cost gate: a job's identity basis, its quoted cost, approval and budget.

``quote_for`` reads the params once and answers everything ``enqueue`` and
``estimate`` need: the dedup basis (the plan hash when ``params["plan"]`` is
given, else the params hash), today's estimated cost, and whether it needs
approval. With a plan, the plan decides: it is re-quoted at today's rates
(``nw.pricing.current_quote``) and a caller's ``params["estimated_usd"]`` is
only reported beside it (``caller_estimated_usd``), never used. Without one
the caller's figure is all there is, and ``quote`` is None to say so.

A plan that cannot be identified (wrong shape, or a value with no canonical
form) is refused by ``enqueue`` and quoted as unknown by ``estimate``, with
``UNREADABLE_PLAN_REASON`` for the person and the exception in the log.
A ``plan`` of None is no plan. With a plan the identity is the plan hash
alone: the plan is the billable work, so other params (a title) do not split
it into two jobs.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from nw import plans, pricing
from nw.jobs.core import ids
from nw.jobs.core.checks import named
from nw.jobs.core.errors import BudgetExceeded, InvalidValue
from nw.jobs.core.model import ACTIVE_STATUSES, UNREADABLE_PLAN_REASON, JobsConfig
from nw.project import Project

log = logging.getLogger("nw.jobs")
#: Float noise allowed when a quote lands exactly on the cap.
_CAP_EPSILON_USD = 1e-9


@dataclass(frozen=True)
class Quote:
    identity: str | None
    """The dedup basis; None only for ``estimate`` of an unreadable plan."""
    estimated_usd: float | None
    has_unknown_costs: bool
    quote: dict[str, Any] | None = None
    caller_estimated_usd: float | None = None
    reason: str | None = None

    def requires_approval(self, config: JobsConfig) -> bool:
        return self.estimated_usd is None or self.estimated_usd >= config.approval_threshold_usd

    def as_estimate(self, config: JobsConfig) -> dict[str, Any]:
        out: dict[str, Any] = {
            "estimated_usd": self.estimated_usd,
            "has_unknown_costs": self.has_unknown_costs,
            "approval_threshold_usd": config.approval_threshold_usd,
            "requires_approval": self.requires_approval(config),
            "quote": self.quote,
        }
        if self.reason:
            out["reason"] = self.reason
        return out

    def gate(
        self,
        store: Any,
        *,
        approved: bool,
        config: JobsConfig,
        job_id: str | None = None,
    ) -> None:
        """Refuse, before anything is written, what the project's budget does not allow.

        ``store`` is the project's store, or None when it has none yet (nothing
        committed). A resubmit of a live job is a dedup, not new spend, so it
        passes. An unknown quote under a cap passes only with ``approved=True``
        and only while committed spend is below the cap. ``approved`` never
        lifts a known quote over the cap.
        """
        cap = config.budget_usd
        if cap is None:
            return
        if store is not None and job_id is not None:
            row = store.get(job_id)
            if row is not None and row.status in ACTIVE_STATUSES:
                return
        totals = store.spend() if store is not None else NO_SPEND
        refuse_over([self], cap, totals, approved=approved)

    def gate_actor(
        self,
        store: Any,
        actor: Mapping[str, str] | None,
        *,
        approved: bool,
        config: JobsConfig,
        now: float,
        job_id: str | None = None,
    ) -> None:
        """The same refusal against one actor's cap (``config.actor_budget_usd``)
        over the spend of the actor's jobs created in the last
        ``actor_budget_window_s``; nothing to check without an actor or a cap."""
        cap = config.actor_budget_usd
        if cap is None or not actor:
            return
        if store is not None and job_id is not None:
            row = store.get(job_id)
            if row is not None and row.status in ACTIVE_STATUSES:
                return
        since = now - config.actor_budget_window_s
        totals = store.spend(actor_id=actor["id"], since=since) if store is not None else NO_SPEND
        refuse_over([self], cap, totals, approved=approved, who=f"actor {actor['id']!r}")


def gate_batch(
    quotes: Sequence[Quote],
    store: Any,
    *,
    approved: bool,
    config: JobsConfig,
    now: float,
    actors: Sequence[Mapping[str, str] | None] | None = None,
    names: Sequence[str | None] | None = None,
) -> None:
    """``Quote.gate`` and ``Quote.gate_actor`` for new jobs admitted together:
    each in turn must fit under the project's cap with the committed spend plus
    the quotes before it, and under its actor's cap with the actor's spend plus
    that actor's quotes before it, so a batch is admitted exactly when
    enqueuing its jobs one by one would admit them all. ``quotes`` are only the
    jobs the batch would write (live duplicates already left out), ``actors``
    their actors; ``names`` say which item a refusal is about."""
    if not quotes:
        return
    names = list(names) if names is not None else [None] * len(quotes)
    if config.budget_usd is not None:
        totals = store.spend() if store is not None else NO_SPEND
        refuse_over(quotes, config.budget_usd, totals, approved=approved, names=names)
    cap = config.actor_budget_usd
    if cap is None or actors is None:
        return
    mine: dict[str, list[int]] = {}
    for k, actor in enumerate(actors):
        if actor:
            mine.setdefault(actor["id"], []).append(k)
    since = now - config.actor_budget_window_s
    for actor_id, ks in mine.items():
        totals = store.spend(actor_id=actor_id, since=since) if store is not None else NO_SPEND
        refuse_over(
            [quotes[k] for k in ks],
            cap,
            totals,
            approved=approved,
            who=f"actor {actor_id!r}",
            names=[names[k] for k in ks],
        )


def refuse_over(
    quotes: Sequence[Quote],
    cap: float,
    totals: Mapping[str, Any],
    *,
    approved: bool,
    who: str | None = None,
    names: Sequence[str | None] | None = None,
    budget: str | None = None,
) -> None:
    """Refuse the first of ``quotes`` that, added in turn to the committed
    spend in ``totals``, would go past ``cap`` (an unknown quote passes only
    approved and while the committed spend is below the cap)."""
    committed = float(totals["actual_usd"]) + float(totals["live_estimated_usd"])
    lower = bool(totals["lower_bound"]) or int(totals["live_unknown"]) > 0
    for k, quote in enumerate(quotes):
        usd = quote.estimated_usd
        if usd is None:
            if approved and committed < cap:
                lower = True  # a live unknown now counts, as it would once written
                continue
        elif committed + usd <= cap + _CAP_EPSILON_USD:
            committed += usd
            continue
        exc = BudgetExceeded(
            cap_usd=cap,
            committed_usd=committed,
            quote_usd=usd,
            committed_is_lower_bound=lower,
            needs_approval=usd is None and not approved,
            actor=who,
            budget=budget,
        )
        name = names[k] if names is not None else None
        raise exc if name is None else named(exc, name)


NO_SPEND: Mapping[str, Any] = MappingProxyType(
    {"actual_usd": 0.0, "live_estimated_usd": 0.0, "live_unknown": 0, "lower_bound": False}
)


#: The most a caller may say one job costs: beyond it a figure is a mistake,
#: and two of them would sum past any float (spend would read $inf).
MAX_JOB_USD = 1e9


def _usd(value: Any) -> float | None:
    return pricing.as_usd(value)


def with_plan_dict(params: Any) -> Any:
    """``params`` with a live plan object replaced by its dict form, checked to
    be identifiable; ``PlanError`` (``NonCanonicalPlan``) when it is not.

    ``enqueue`` stores params as JSON and hands the stored params to the body,
    so the body always receives the dict form (``falaw.plan_from_dict`` turns
    it back into a Plan)."""
    if not isinstance(params, Mapping) or params.get("plan") is None:
        return params
    plan = plans.as_plan_dict(params["plan"])
    plans.plan_hash(plan)
    return {**params, "plan": plan}


def quote_for(
    project: Project,
    kind: str,
    params: Mapping[str, Any],
    config: JobsConfig,
    *,
    for_estimate: bool = False,
) -> Quote:
    """The quote for these params (see the module doc). For ``enqueue``
    (``for_estimate=False``) an unidentifiable plan raises ``PlanError``."""
    caller = _usd(params.get("estimated_usd"))
    if (caller is None and params.get("estimated_usd") is not None) or (
        caller is not None and caller > MAX_JOB_USD
    ):
        raise InvalidValue(
            f"params['estimated_usd'] must be a number of dollars from 0 to {MAX_JOB_USD:,.0f},"
            f" got {params.get('estimated_usd')!r}"
        )
    if params.get("plan") is None:
        return Quote(
            identity=ids.params_hash(params),
            estimated_usd=caller,
            has_unknown_costs=caller is None,
        )
    try:
        plan = plans.read_plan(params["plan"])
        identity = plans.plan_hash(plan)
    except plans.PlanError:
        if not for_estimate:
            raise
        log.warning("estimate: params['plan'] cannot be read as a plan", exc_info=True)
        unreadable: dict[str, Any] = {
            "status": pricing.STATUS_UNKNOWN,
            "total_usd": None,
            "as_of_total_usd": None,
            "unknown_calls": None,
            "calls": [],
            "caller_estimated_usd": caller,
            "reason": UNREADABLE_PLAN_REASON,
        }
        return Quote(None, None, True, unreadable, caller, UNREADABLE_PLAN_REASON)
    today = pricing.current_quote(plan, rates_path=config.rates_path, pricers=config.pricers)
    return Quote(
        identity=identity,
        estimated_usd=today.total_usd,
        has_unknown_costs=today.total_usd is None,
        quote={**today.to_dict(), "caller_estimated_usd": caller},
        caller_estimated_usd=caller,
    )


def spend_view(
    totals: Mapping[str, Any], config: JobsConfig, *, cap: float | str | None = "project"
) -> dict[str, Any]:
    """Committed spend from the store's totals (see ``facade.spend``), against
    the project's cap or the one given (an actor's)."""
    actual = float(totals["actual_usd"])
    live = float(totals["live_estimated_usd"])
    unknown = int(totals["live_unknown"])
    total = actual + live
    if cap == "project":
        cap = config.budget_usd
    assert not isinstance(cap, str), cap  # "project" is the one name of a cap
    return {
        "actual_usd": actual,
        "live_estimated_usd": live,
        "total_usd": total,
        "live_unknown_count": unknown,
        "is_lower_bound": bool(totals["lower_bound"]) or unknown > 0,
        "budget_usd": cap,
        "remaining_usd": None if cap is None else round(cap - total, 9),
    }
