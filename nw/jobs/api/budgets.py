"""The spend policy that lives with the project: stored budgets and the approval policy.

A budget caps what one scope may commit (the spend of finished jobs plus the
estimates of live ones) in one window: every job, one actor's, one kind's, or
one actor's jobs of one kind; over all time or per ``day``, ``week`` or
``month``. It is kept in the store, so it holds on every door whatever the
caller passes (``enqueue``, ``enqueue_many``, ``retry_job``, ``retry_jobs``,
the CLI, the web API): each of them runs ``admit_stored`` inside the store's
create transaction, beside the caller's config caps (both apply: the stricter
wins). On PostgreSQL the policy is database-wide and a budget counts the
spend of every project in the database (as limits are: the projects share the
provider account); on the embedded store it is the project's, in its file.

Windows are calendar windows in UTC (a day from 00:00 UTC, a week from Monday
00:00 UTC, a month from the 1st 00:00 UTC), not rolling ones: a provider
bills by calendar period, an operator reads "today's budget" as the UTC day,
and the prune rollup keeps pruned spend per UTC day, so a calendar window
counts pruned jobs exactly (a rolling one would have to guess what part of a
pruned day fell inside). A finished job counts in the window its finish falls
in (when it was billed); a live job's estimate counts in the current window
(it is being spent now).

The approval policy (``set_approval``) sets the threshold at or above which a
quote needs approval (over ``JobsConfig.approval_threshold_usd``) and its
``mode``: ``advisory`` (the default: ``estimate`` says so, ``enqueue`` does
not ask) or ``required`` (an enqueue whose quote needs approval is refused
with ``ApprovalRequired`` unless ``approved=True``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from nw.errors import ApprovalRequired, InvalidType, InvalidValue
from nw.jobs.api import costing
from nw.jobs.api.handles import ProjectLike, reader
from nw.jobs.core.checks import named
from nw.jobs.core.model import DEFAULT_CONFIG, JobsConfig
from nw.jobs.stores import shared_store
from nw.project import as_project

PERIODS = ("day", "week", "month")
MODES = ("advisory", "required")
MAX_USD = 1e12
_QUOTED = set(' ,=/"\\')


@dataclass(frozen=True)
class Budget:
    """One stored budget: ``usd`` over ``per`` (None: all time) for ``actor``
    and ``kind`` (None: every one)."""

    usd: float
    per: str | None = None
    actor: str | None = None
    kind: str | None = None

    @property
    def key(self) -> str:
        """Its name: scope then window, e.g. ``all/day``, ``actor=alice``,
        ``actor=alice,kind=render/month`` (one budget per key)."""
        parts = [f"{name}={_quote(v)}" for name, v in (("actor", self.actor), ("kind", self.kind))]
        scope = ",".join(p for p, v in zip(parts, (self.actor, self.kind), strict=True) if v)
        return (scope or "all") + (f"/{self.per}" if self.per else "")

    def applies(self, actor_id: str | None, kind: str) -> bool:
        return (self.actor is None or self.actor == actor_id) and (
            self.kind is None or self.kind == kind
        )


def _quote(value: str | None) -> str:
    if value is None:
        return ""
    return json.dumps(value) if (not value or _QUOTED & set(value)) else value


@dataclass(frozen=True)
class Policy:
    """The stored spend policy as one enqueue reads it."""

    budgets: tuple[Budget, ...] = ()
    threshold_usd: float | None = None
    mode: str = "advisory"

    def threshold(self, config: JobsConfig) -> float:
        """The approval threshold: the stored one, else the caller's config."""
        return config.approval_threshold_usd if self.threshold_usd is None else self.threshold_usd

    def requires_approval(self, usd: float | None, config: JobsConfig) -> bool:
        return usd is None or usd >= self.threshold(config)

    @property
    def empty(self) -> bool:
        return not self.budgets and self.mode != "required"


NO_POLICY = Policy()


def policy_of(store: Any) -> Policy:
    """The policy kept in ``store`` (``NO_POLICY`` without a store)."""
    if store is None or not hasattr(store, "policy_rows"):
        return NO_POLICY
    rows = store.policy_rows()  # one read: every enqueue pays it
    found = tuple(
        Budget(float(r["usd"]), r["per"], r["actor_id"], r["kind"])
        for r in rows
        if r["what"] == "budget"
    )
    approval = next((r for r in rows if r["what"] == "approval"), None)
    if approval is None:
        return Policy(found)
    threshold = approval["threshold_usd"]
    return Policy(found, None if threshold is None else float(threshold), str(approval["mode"]))


# ----- windows ------------------------------------------------------------------------
def window(per: str | None, now: float) -> tuple[float | None, float | None]:
    """(start, end) in epoch seconds of the calendar window (UTC) holding ``now``;
    (None, None) for all time."""
    if per is None:
        return None, None
    t = datetime.fromtimestamp(now, UTC)
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if per == "day":
        start, end = day, day + timedelta(days=1)
    elif per == "week":
        start = day - timedelta(days=day.weekday())
        end = start + timedelta(days=7)
    else:
        start = day.replace(day=1)
        end = (start + timedelta(days=32)).replace(day=1)
    return start.timestamp(), end.timestamp()


# ----- checks ---------------------------------------------------------------------------
def check_usd(value: Any, name: str) -> float:
    """A finite, non-negative dollar figure (``InvalidType`` / ``InvalidValue`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidType(f"{name} must be a number of dollars, not {type(value).__name__}")
    usd = float(value)
    if not math.isfinite(usd) or usd < 0 or usd > MAX_USD:
        raise InvalidValue(f"{name} must be a finite number of dollars from 0, got {value!r}")
    return usd


def _check_name(value: Any, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidType(f"{name} must be a string or None, not {type(value).__name__}")
    if not value.strip() or len(value) > 200 or "\x00" in value:
        raise InvalidValue(f"{name} must be 1 to 200 characters, got {value!r}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidValue(f"{name} must be valid text (no lone surrogates)") from None
    return value


def _check_per(per: Any) -> str | None:
    if per is not None and per not in PERIODS:
        raise InvalidValue(f"per must be one of {', '.join(PERIODS)} or None, got {per!r}")
    return per


def budget_of(usd: Any, *, per: Any = None, actor: Any = None, kind: Any = None) -> Budget:
    """A checked ``Budget`` (``usd`` None is allowed by ``remove_budget`` only)."""
    return Budget(
        check_usd(usd, "usd"),
        _check_per(per),
        _check_name(actor, "actor"),
        _check_name(kind, "kind"),
    )


# ----- the gate -------------------------------------------------------------------------
def check_approval(
    quotes: Sequence[costing.Quote],
    policy: Policy,
    config: JobsConfig,
    *,
    approved: bool,
    names: Sequence[str | None] | None = None,
) -> None:
    """In ``required`` mode, refuse the first quote that needs approval (unless approved)."""
    if policy.mode != "required" or approved:
        return
    for k, quote in enumerate(quotes):
        if policy.requires_approval(quote.estimated_usd, config):
            exc = ApprovalRequired(
                quote_usd=quote.estimated_usd, threshold_usd=policy.threshold(config)
            )
            name = names[k] if names is not None else None
            raise exc if name is None else named(exc, name)


def gate_stored(
    store: Any,
    quotes: Sequence[costing.Quote],
    whos: Sequence[tuple[str | None, str]],
    policy: Policy,
    *,
    approved: bool,
    config: JobsConfig,
    now: float,
    names: Sequence[str | None] | None = None,
    hold: bool = False,
) -> None:
    """Refuse what the stored policy does not allow: the approval policy, then
    each budget over the quotes it applies to (``whos``: each quote's actor id
    and kind), in turn, as ``costing.refuse_over`` does for a config cap.
    ``hold``: inside an admitted create, lock the budgets first (PostgreSQL)."""
    check_approval(quotes, policy, config, approved=approved, names=names)
    if not policy.budgets or not quotes:
        return
    names = list(names) if names is not None else [None] * len(quotes)
    mine = [
        (b, [k for k, (actor_id, kind) in enumerate(whos) if b.applies(actor_id, kind)])
        for b in policy.budgets
    ]
    mine = sorted(((b, ks) for b, ks in mine if ks), key=lambda pair: pair[0].key)
    if not mine:
        return
    if hold:
        store.hold_budgets([b.key for b, _ in mine])
    for b, ks in mine:
        since, _ = window(b.per, now)
        totals = store.budget_spend(since=since, actor_id=b.actor, kind=b.kind)
        costing.refuse_over(
            [quotes[k] for k in ks],
            b.usd,
            totals,
            approved=approved,
            names=[names[k] for k in ks],
            budget=b.key,
        )


def who_of(actor: Mapping[str, str] | None, kind: str) -> tuple[str | None, str]:
    return (actor["id"] if actor else None), kind


def admit_one(
    base: Callable[[], None] | None,
    store: Any,
    quote: costing.Quote,
    actor: Mapping[str, str] | None,
    kind: str,
    *,
    approved: bool,
    config: JobsConfig,
    now: float,
) -> Callable[[], None] | None:
    """``create``'s ``admit`` for one job: ``base`` (the config caps) and then
    the stored policy, read from ``store`` now; ``base`` as it is when the
    policy is empty."""
    policy = policy_of(store)
    if policy.empty:
        return base

    def admit() -> None:
        if base is not None:
            base()
        gate_stored(
            store,
            [quote],
            [who_of(actor, kind)],
            policy,
            approved=approved,
            config=config,
            now=now,
            hold=True,
        )

    return admit


def admit_batch(
    base: Callable[[list[int]], None] | None,
    store: Any,
    quotes: Sequence[costing.Quote],
    whos: Sequence[tuple[str | None, str]],
    names: Sequence[str],
    *,
    approved: bool,
    config: JobsConfig,
    now: float,
) -> Callable[[list[int]], None] | None:
    """``create_many``'s ``admit``: ``base`` and the stored policy over the
    positions the store will write (the batch as a whole)."""
    policy = policy_of(store)
    if policy.empty:
        return base

    def admit(positions: list[int]) -> None:
        if base is not None:
            base(positions)
        gate_stored(
            store,
            [quotes[k] for k in positions],
            [whos[k] for k in positions],
            policy,
            approved=approved,
            config=config,
            now=now,
            names=[names[k] for k in positions],
            hold=True,
        )

    return admit


# ----- the calls ------------------------------------------------------------------------
def set_budget(
    project: ProjectLike,
    usd: float,
    *,
    per: str | None = None,
    actor: str | None = None,
    kind: str | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> dict[str, Any]:
    """Set (or change) the budget of a scope and window, where every door sees it.

    ``usd``: the cap (finite, from 0; 0 stops all new spend in the scope);
    ``per``: ``"day"``, ``"week"``, ``"month"`` (calendar windows in UTC) or
    None (all time); ``actor`` / ``kind``: narrow it to one actor id and/or
    one kind. Database-wide on PostgreSQL, the project's on the embedded store.
    Returns the budget as ``list_budgets`` shows it."""
    budget = budget_of(usd, per=per, actor=actor, kind=kind)
    store = shared_store(as_project(project), config, create=True)
    store.set_budget(
        budget.key,
        usd=budget.usd,
        per=budget.per,
        actor_id=budget.actor,
        kind=budget.kind,
        now=config.clock(),
    )
    return next(b for b in list_budgets(project, config=config) if b["key"] == budget.key)


def remove_budget(
    project: ProjectLike,
    *,
    per: str | None = None,
    actor: str | None = None,
    kind: str | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> bool:
    """Remove the budget of that scope and window; False when there was none."""
    key = Budget(0.0, _check_per(per), _check_name(actor, "actor"), _check_name(kind, "kind")).key
    store, _ = reader(as_project(project), config)
    if store is None or not any(r["budget_key"] == key for r in store.budgets()):
        return False
    store = shared_store(as_project(project), config, create=True)
    store.set_budget(key, usd=None, per=None, actor_id=None, kind=None, now=config.clock())
    return True


def list_budgets(project: ProjectLike, *, config: JobsConfig = DEFAULT_CONFIG) -> list[dict]:
    """Every stored budget with where it stands now: ``key``, ``usd`` (the cap),
    ``per``, ``actor``, ``kind``, ``spent_usd`` (committed in the current
    window: actuals plus live estimates), ``remaining_usd``,
    ``is_lower_bound``, ``window_start`` / ``window_end`` (epoch seconds, None
    for all time) and ``scope`` (``"database"`` or ``"project"``)."""
    store, _ = reader(as_project(project), config)
    policy = policy_of(store)
    now = config.clock()
    out = []
    for b in sorted(policy.budgets, key=lambda b: b.key):
        assert store is not None  # the budgets were read from it
        start, end = window(b.per, now)
        view = costing.spend_view(
            store.budget_spend(since=start, actor_id=b.actor, kind=b.kind), config, cap=b.usd
        )
        out.append(
            {
                "key": b.key,
                "usd": b.usd,
                "per": b.per,
                "actor": b.actor,
                "kind": b.kind,
                "spent_usd": view["total_usd"],
                "remaining_usd": view["remaining_usd"],
                "is_lower_bound": view["is_lower_bound"],
                "window_start": start,
                "window_end": end,
                "scope": getattr(store, "budget_scope", "project"),
            }
        )
    return out


def set_approval(
    project: ProjectLike,
    *,
    threshold_usd: float | None = None,
    mode: str = "advisory",
    config: JobsConfig = DEFAULT_CONFIG,
) -> dict[str, Any]:
    """Store the approval policy: the threshold at or above which a quote needs
    approval (None: the caller's ``JobsConfig.approval_threshold_usd``) and
    ``mode``: ``"advisory"`` (the default: reported, not enforced) or
    ``"required"`` (every door refuses such a job without ``approved=True``,
    with ``ApprovalRequired``). Returns ``get_approval``'s answer."""
    if mode not in MODES:
        raise InvalidValue(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    threshold = None if threshold_usd is None else check_usd(threshold_usd, "threshold_usd")
    store = shared_store(as_project(project), config, create=True)
    store.set_approval(threshold_usd=threshold, mode=mode, now=config.clock())
    return get_approval(project, config=config)


def get_approval(project: ProjectLike, *, config: JobsConfig = DEFAULT_CONFIG) -> dict[str, Any]:
    """The approval policy in force: ``{threshold_usd, mode, stored}`` (``stored``
    False: none is kept, the config's threshold and advisory mode apply)."""
    store, _ = reader(as_project(project), config)
    approval = store.approval() if store is not None and hasattr(store, "approval") else None
    policy = policy_of(store)
    return {
        "threshold_usd": policy.threshold(config),
        "mode": policy.mode,
        "stored": approval is not None,
    }
