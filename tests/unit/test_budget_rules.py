"""The spend policy's pure parts: calendar windows in UTC, budget keys, the
checks of a cap, the approval policy and the stored gate over a batch."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nw.errors import ApprovalRequired, BudgetExceeded, InvalidInput
from nw.jobs.api.budgets import Budget, Policy, budget_of, check_approval, gate_stored, window
from nw.jobs.api.costing import Quote
from nw.jobs.core.model import JobsConfig


def ts(*args):
    return datetime(*args, tzinfo=UTC).timestamp()


@given(st.floats(min_value=0, max_value=4e9), st.sampled_from(["day", "week", "month"]))
def test_a_window_holds_its_instant_and_starts_at_a_utc_midnight(now, per):
    start, end = window(per, now)
    assert start <= now < end
    first = datetime.fromtimestamp(start, UTC)
    assert (first.hour, first.minute, first.second, first.microsecond) == (0, 0, 0, 0)
    if per == "week":
        assert first.weekday() == 0
    if per == "month":
        assert first.day == 1 and datetime.fromtimestamp(end, UTC).day == 1


def test_window_edges():
    assert window("day", ts(2026, 12, 3))[0] == ts(2026, 12, 3)  # midnight opens the new day
    assert window("day", ts(2026, 12, 2, 23, 59, 59))[1] == ts(2026, 12, 3)
    assert window("week", ts(2026, 12, 6, 23, 0)) == (ts(2026, 11, 30), ts(2026, 12, 7))  # Sunday
    assert window("month", ts(2026, 12, 31, 23, 0)) == (ts(2026, 12, 1), ts(2027, 1, 1))
    assert window("month", ts(2028, 2, 29)) == (ts(2028, 2, 1), ts(2028, 3, 1))


@pytest.mark.parametrize("usd", [-0.01, math.nan, -math.inf, math.inf, "1", None, True, 1e13])
def test_a_cap_must_be_a_finite_dollar_amount(usd):
    with pytest.raises(InvalidInput, match="usd"):
        budget_of(usd)


def test_a_budget_applies_to_its_actor_and_kind_only():
    b = Budget(1.0, "day", "ann", "render")
    assert b.applies("ann", "render")
    assert not b.applies("bob", "render") and not b.applies("ann", "draw")
    assert not b.applies(None, "render")
    assert Budget(1.0).applies(None, "anything")


def test_the_stored_threshold_replaces_the_configs_and_required_mode_refuses():
    config = JobsConfig(approval_threshold_usd=1.0)
    assert Policy().threshold(config) == 1.0
    policy = Policy(threshold_usd=5.0, mode="required")
    assert policy.threshold(config) == 5.0
    cheap, dear, unknown = Quote("a", 4.0, False), Quote("b", 5.0, False), Quote("c", None, True)
    check_approval([cheap], policy, config, approved=False)
    for quote in (dear, unknown):
        with pytest.raises(ApprovalRequired) as refused:
            check_approval([cheap, quote], policy, config, approved=False, names=["i0", "i1"])
        assert str(refused.value).startswith("i1: approval required")
        assert isinstance(refused.value, BudgetExceeded) and refused.value.needs_approval
        check_approval([quote], policy, config, approved=True)
    check_approval([dear], Policy(threshold_usd=5.0), config, approved=False)  # advisory


class FakeStore:
    """Counts what the gate reads; each budget has committed ``spent``."""

    def __init__(self, spent):
        self.spent, self.held, self.read = spent, [], []

    def hold_budgets(self, keys):
        self.held.append(list(keys))

    def budget_spend(self, *, since, actor_id, kind):
        self.read.append((actor_id, kind, since))
        return {
            "actual_usd": self.spent,
            "live_estimated_usd": 0.0,
            "live_unknown": 0,
            "lower_bound": False,
        }


def test_the_stored_gate_checks_each_budget_over_the_quotes_it_applies_to():
    policy = Policy((Budget(1.0, None, "ann"), Budget(1.0, "day", None, "render")))
    quotes = [Quote("a", 0.6, False), Quote("b", 0.6, False)]
    store = FakeStore(0.0)
    # ann's two jobs of two kinds: her budget sees both and refuses the second
    with pytest.raises(BudgetExceeded) as refused:
        gate_stored(
            store,
            quotes,
            [("ann", "draw"), ("ann", "render")],
            policy,
            approved=False,
            config=JobsConfig(),
            now=ts(2026, 12, 3, 12),
            names=["item 0", "item 1"],
            hold=True,
        )
    assert refused.value.budget == "actor=ann" and str(refused.value).startswith("item 1: ")
    assert store.held == [["actor=ann", "kind=render/day"]]  # both locked, in key order
    # bob's job of another kind meets neither budget: nothing is read or held
    quiet = FakeStore(0.0)
    gate_stored(
        quiet,
        quotes[:1],
        [("bob", "draw")],
        policy,
        approved=False,
        config=JobsConfig(),
        now=0.0,
        hold=True,
    )
    assert quiet.held == [] and quiet.read == []
    # the day budget counts from the UTC day's start
    day = FakeStore(0.3)
    gate_stored(
        day,
        quotes[:1],
        [(None, "render")],
        policy,
        approved=False,
        config=JobsConfig(),
        now=ts(2026, 12, 3, 12),
    )
    assert day.read == [(None, "render", ts(2026, 12, 3))]
