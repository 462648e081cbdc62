"""Rate tables and current_quote: today's price or an honest unknown, never yesterday's."""

from __future__ import annotations

import json
import re
import sys

import pytest

from nw import pricing
from nw.pricing import RateTableError, Unpriceable, current_quote

TABLE = {
    "id": "test.rates",
    "as_of": "2026-11-01",
    "rates": {
        "img/per-image": {"unit": "image", "usd": 0.04},
        "img/per-mp": {"unit": "megapixel", "usd": 0.025},
        "vid/per-second": {"unit": "second", "usd": 0.05},
        "llm/per-1k": {"unit": "1k_tokens", "usd": 0.01},
    },
}


def write_table(folder, table=TABLE, name="rates.json"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(table))
    return path


def with_rate(model, usd, table=TABLE):
    return {**table, "rates": {**table["rates"], model: {**table["rates"][model], "usd": usd}}}


@pytest.fixture
def rates(tmp_path):
    return write_table(tmp_path / "rates")


def priced_call(model, quantities, rates_path, **over):
    usd, basis = pricing.quote_call(model, quantities, rates_path=rates_path)
    return {
        "tool": "t",
        "application": model,
        "arguments": {"q": quantities},
        "output_kind": "image",
        "estimated_cost_usd": usd,
        "cost_basis": basis,
        **over,
    }


# ----- rate tables ---------------------------------------------------------------


def test_the_shipped_table_loads_with_id_date_digest_and_every_unit():
    tables = pricing.rate_tables()
    assert tables, "no shipped rate table"
    for table in tables.values():
        assert table.id and re.fullmatch(r"\d{4}-\d{2}-\d{2}", table.as_of)
        assert re.fullmatch(r"[0-9a-f]{16}", table.digest)
    units = {r.unit for t in tables.values() for r in t.rates.values()}
    assert units == set(pricing.UNITS)


def test_the_digest_is_the_content_not_the_bytes(tmp_path):
    a = pricing.load_table(write_table(tmp_path / "a"))
    noted = {**TABLE, "note": "whitespace and notes are not prices"}
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "t.json").write_text(json.dumps(noted, indent=4))
    b = pricing.load_table(tmp_path / "b" / "t.json")
    moved = pricing.load_table(write_table(tmp_path / "c", with_rate("img/per-image", 0.05)))
    redated = pricing.load_table(write_table(tmp_path / "d", {**TABLE, "as_of": "2027-01-01"}))
    assert a.digest == b.digest
    assert len({a.digest, moved.digest, redated.digest}) == 3


def test_rates_path_replaces_the_shipped_tables_as_a_file_or_a_folder(rates):
    for where in (rates, rates.parent, str(rates)):
        assert set(pricing.rate_tables(where)) == {"test.rates"}


def test_an_edited_table_takes_effect_on_the_next_quote(rates):
    # Given a plan priced today, when the table file is edited (same size, same
    # second), then the next quote reads the new price.
    plan = {"calls": [priced_call("img/per-image", {"images": 1}, rates)]}
    assert current_quote(plan, rates_path=rates).total_usd == pytest.approx(0.04)
    write_table(rates.parent, with_rate("img/per-image", 0.07))
    assert current_quote(plan, rates_path=rates).total_usd == pytest.approx(0.07)


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ([], "JSON object"),
        ({**TABLE, "id": ""}, "'id'"),
        ({**TABLE, "as_of": None}, "as_of"),
        ({**TABLE, "currency": "EUR"}, "USD"),
        ({**TABLE, "rates": {"m": {"unit": "per_call", "usd": 1}}}, "unit must be one of"),
        ({**TABLE, "rates": {"m": {"unit": "image", "usd": -1}}}, "usd must be"),
        ({**TABLE, "rates": {"m": {"unit": "image", "usd": True}}}, "usd must be"),
        ({**TABLE, "rates": {"m": {"unit": "image", "usd": float("nan")}}}, "usd must be"),
    ],
)
def test_a_malformed_table_is_refused_naming_the_problem(tmp_path, table, says):
    path = write_table(tmp_path, table)
    with pytest.raises(RateTableError, match=re.escape(says)):
        pricing.rate_tables(path)


def test_two_tables_with_one_id_or_none_at_all_are_refused(tmp_path):
    write_table(tmp_path / "two", name="a.json")
    write_table(tmp_path / "two", name="b.json")
    with pytest.raises(RateTableError, match="in both"):
        pricing.rate_tables(tmp_path / "two")
    (tmp_path / "empty").mkdir()
    with pytest.raises(RateTableError, match="no"):
        pricing.rate_tables(tmp_path / "empty")
    with pytest.raises(RateTableError, match="does not exist"):
        pricing.rate_tables(tmp_path / "missing")
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(RateTableError, match="not JSON"):
        pricing.rate_tables(tmp_path / "junk.json")


@pytest.mark.parametrize(
    ("model", "quantities", "usd"),
    [
        ("img/per-image", {"images": 4}, 0.16),
        ("img/per-mp", {"megapixels": 2.0}, 0.05),
        ("vid/per-second", {"seconds": 6}, 0.30),
        ("llm/per-1k", {"tokens": 2500}, 0.025),
        ("vid/per-second", {"seconds": 5, "count": 3}, 0.75),
    ],
)
def test_each_unit_prices_its_quantity(rates, model, quantities, usd):
    price, basis = pricing.quote_call(model, quantities, rates_path=rates)
    assert price == pytest.approx(usd)
    table = pricing.rate_tables(rates)["test.rates"]
    assert basis == {
        "pricer": "rate_table",
        "priced": model,
        "quantities": quantities,
        "table": "test.rates",
        "table_version": table.digest,
    }


@pytest.mark.parametrize(
    ("model", "quantities", "says"),
    [
        ("vid/per-second", {}, "'seconds'"),
        ("vid/per-second", {"seconds": -1}, "'seconds'"),
        ("vid/per-second", {"seconds": "6"}, "'seconds'"),
        ("img/per-image", {"images": 1, "count": -2}, "count"),
        ("nope/model", {"images": 1}, "no loaded table"),
    ],
)
def test_what_cannot_be_priced_is_unpriceable_never_free(rates, model, quantities, says):
    with pytest.raises(Unpriceable, match=re.escape(says)):
        pricing.quote_call(model, quantities, rates_path=rates)


# ----- current_quote: unchanged / changed / unknown ------------------------------


def test_a_plan_priced_at_todays_rates_is_unchanged(rates):
    plan = {
        "calls": [
            priced_call("img/per-image", {"images": 2}, rates),
            priced_call("vid/per-second", {"seconds": 5}, rates),
        ]
    }
    quote = current_quote(plan, rates_path=rates)
    assert quote.status == "unchanged" and quote.unknown_calls == 0
    assert quote.total_usd == pytest.approx(0.33) == quote.as_of_total_usd
    assert [c.status for c in quote.calls] == ["unchanged", "unchanged"]
    assert not any(c.basis_changed for c in quote.calls)


def test_a_moved_table_requotes_at_todays_price_and_keeps_the_old_for_audit(tmp_path, rates):
    # Given a plan priced yesterday, when the same table moves its price up,
    # then today's total is the new price and the frozen one is only audit.
    plan = {"calls": [priced_call("vid/per-second", {"seconds": 10}, rates)]}
    today = write_table(tmp_path / "today", with_rate("vid/per-second", 0.5))
    quote = current_quote(plan, rates_path=today)
    assert quote.status == "changed"
    assert quote.total_usd == pytest.approx(5.0) and quote.as_of_total_usd == pytest.approx(0.5)
    (only,) = quote.calls
    assert only.basis_changed and only.table_version_then != only.table_version_now
    assert only.table_version_now == pricing.rate_tables(today)["test.rates"].digest


def test_a_figure_that_was_never_frozen_but_prices_today_is_changed(rates):
    call = priced_call("img/per-image", {"images": 1}, rates, estimated_cost_usd=None)
    quote = current_quote({"calls": [call]}, rates_path=rates)
    assert quote.status == "changed" and quote.total_usd == pytest.approx(0.04)
    assert quote.as_of_total_usd is None


def unknown_cases(rates):
    good = priced_call("img/per-image", {"images": 1}, rates)
    basis = good["cost_basis"]
    return {
        "no basis": ({**good, "cost_basis": None}, "no_basis", "no cost_basis"),
        "unknown model": (
            {**good, "cost_basis": {**basis, "priced": "gone/model"}},
            "unknown",
            "not in rate table",
        ),
        "table not loaded": (
            {**good, "cost_basis": {**basis, "table": "someone.elses"}},
            "unknown",
            "not loaded",
        ),
        "missing quantity": (
            {**good, "cost_basis": {**basis, "quantities": {}}},
            "unknown",
            "'images'",
        ),
        "unknown pricer": (
            {**good, "cost_basis": {**basis, "pricer": "guesswork"}},
            "unknown",
            "no pricer named",
        ),
        "malformed basis": ({**good, "cost_basis": "cheap"}, "unknown", "not a mapping"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "no basis",
        "unknown model",
        "table not loaded",
        "missing quantity",
        "unknown pricer",
        "malformed basis",
    ],
)
def test_a_call_that_cannot_be_requoted_makes_the_total_unknown_not_the_old_figure(rates, case):
    bad, call_status, says = unknown_cases(rates)[case]
    good = priced_call("vid/per-second", {"seconds": 4}, rates)
    quote = current_quote({"calls": [good, bad]}, rates_path=rates)
    assert quote.status == "unknown" and quote.total_usd is None
    assert quote.unknown_calls == 1
    assert quote.as_of_total_usd == pytest.approx(0.24)
    assert quote.calls[0].status == "unchanged"
    assert quote.calls[1].status == call_status and quote.calls[1].usd is None
    assert says in quote.calls[1].reason


def test_a_cache_hit_is_not_billable_and_needs_no_basis(rates):
    hit = {"tool": "t", "application": "x", "arguments": {}, "output_kind": "image"}
    plan = {
        "calls": [
            {**hit, "cache_status": "hit", "estimated_cost_usd": 0.3},
            priced_call("img/per-image", {"images": 1}, rates),
        ]
    }
    quote = current_quote(plan, rates_path=rates)
    assert quote.status == "unchanged" and quote.total_usd == pytest.approx(0.04)
    assert quote.calls[0].status == "cache_hit" and not quote.calls[0].billable


def test_the_quote_is_plain_data(rates):
    plan = {"calls": [priced_call("img/per-image", {"images": 1}, rates)]}
    out = current_quote(plan, rates_path=rates).to_dict()
    assert json.loads(json.dumps(out)) == out
    assert set(out) == {"status", "total_usd", "as_of_total_usd", "unknown_calls", "calls"}
    assert out["calls"][0]["billable"] is True and out["calls"][0]["basis_changed"] is False


def test_an_unreadable_plan_is_a_plan_error_not_a_quote(rates):
    from nw.plans import PlanError

    with pytest.raises(PlanError):
        current_quote({"calls": "nope"}, rates_path=rates)


# ----- pluggable pricers ---------------------------------------------------------


class Flat:
    def __init__(self, usd):
        self.usd = usd

    def quote(self, basis):
        if self.usd is None:
            raise Unpriceable("flat pricer has no price")
        return pricing.Priced(self.usd * basis.quantities.get("n", 1), "flat", "v1")


class Broken:
    def quote(self, basis):
        raise RuntimeError("the pricer has a bug")


def flat_call(**over):
    return {
        "tool": "t",
        "application": "m",
        "arguments": {},
        "output_kind": "text",
        "estimated_cost_usd": 0.2,
        "cost_basis": {"pricer": "flat", "priced": "m", "quantities": {"n": 2}},
        **over,
    }


def test_a_plugged_pricer_prices_its_bases(rates):
    quote = current_quote({"calls": [flat_call()]}, rates_path=rates, pricers={"flat": Flat(0.1)})
    assert quote.status == "unchanged" and quote.total_usd == pytest.approx(0.2)
    assert quote.calls[0].table == "flat" and quote.calls[0].table_version_now == "v1"


@pytest.mark.parametrize("pricer", [Flat(None), Broken(), Flat(float("nan"))])
def test_a_pricer_that_cannot_price_or_fails_gives_unknown(rates, pricer):
    quote = current_quote({"calls": [flat_call()]}, rates_path=rates, pricers={"flat": pricer})
    assert quote.status == "unknown" and quote.total_usd is None


def test_falaw_priced_calls_are_unknown_without_falaw(rates, monkeypatch):
    for name in ("falaw", "falaw.plan", "falaw.reprice"):
        monkeypatch.setitem(sys.modules, name, None)
    call = flat_call(
        cost_basis={"pricer": "model_catalogue", "priced": "fal-ai/flux/dev", "quantities": {}}
    )
    quote = current_quote({"calls": [call]}, rates_path=rates)
    assert quote.status == "unknown" and "nw-jobs[fal]" in quote.calls[0].reason


def test_a_falaw_planned_call_requotes_through_falaw(rates):
    falaw = pytest.importorskip("falaw")
    planned = falaw.Plan(calls=(falaw.plan_generate_image("a tiger", consult_cache=False),))
    for plan in (planned, falaw.plan_to_dict(planned)):
        quote = current_quote(plan, rates_path=rates)
        assert quote.status == "unchanged", quote.calls[0].reason
        assert quote.total_usd == pytest.approx(planned.total_cost_usd)
    foreign = falaw.plan_to_dict(planned)
    foreign["calls"][0]["cost_basis"]["table"] = "my/invoice.json"
    assert current_quote(foreign, rates_path=rates).status == "unknown"
