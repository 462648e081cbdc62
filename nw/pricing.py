"""Rate tables and today's quote for a plan: ``current_quote(plan) -> PlanQuote``.

An estimate is re-quoted, never remembered. A call's ``estimated_cost_usd``
was true when the plan was written; rate tables move, and gating on that
frozen figure under-quotes, the one direction a spend decision must never err
in. So every billable call is priced again from its ``cost_basis`` against
today's table, and a call that cannot be priced again makes the whole quote
unknown (``total_usd`` None), never the old number.

A cost basis is plain data on a call::

    {"pricer": "rate_table",        # which pricing rule (a key of the pricers)
     "priced": "fal-ai/flux/dev",   # the model whose rate applies
     "quantities": {"megapixels": 1.05, "count": 1},
     "table": "nw.fal",             # the rate table's id ...
     "table_version": "9c1e..."}    # ... and its content digest at plan time

A rate table is a JSON file (``nw/pricing_data/*.json`` are shipped;
``JobsConfig.rates_path`` names a file or folder that replaces them, read
again whenever a file changes, so a deployment moves prices without a
release)::

    {"id": "nw.fal", "as_of": "2026-11-01",
     "rates": {"fal-ai/flux/dev": {"unit": "megapixel", "usd": 0.025}, ...}}

Units and the quantity each reads: ``image`` (``images``), ``second``
(``seconds`` of output video or audio), ``megapixel`` (``megapixels``),
``1k_tokens`` (``tokens``); an optional ``count`` multiplies. The table's
version is a digest of its id, date and rates, so numbers that moved give a
new version even when nobody bumped the date.

A basis naming a table id that is not loaded is unknown ("the table moved
out from under it"): two sets of books never re-quote each other. The same
id at a new version is re-quoted at today's numbers (``basis_changed``).

Pricers are pluggable: anything with ``quote(basis) -> Priced`` that raises
``Unpriceable`` for what it cannot price, keyed by the basis's ``pricer``.
Shipped: ``rate_table`` (the tables above), and ``model_catalogue`` /
``llm_rates``, which re-quote a falaw-planned call through falaw's own
published tables when falaw is installed.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from nw import canonical, plans
from nw.errors import RateTableError, Unpriceable  # importable from here, as before

log = logging.getLogger("nw.pricing")
RATE_TABLE_PRICER = "rate_table"
#: unit -> the basis quantity it is priced by, and the divisor of that quantity.
UNITS: Mapping[str, tuple[str, float]] = {
    "image": ("images", 1.0),
    "second": ("seconds", 1.0),
    "megapixel": ("megapixels", 1.0),
    "1k_tokens": ("tokens", 1000.0),
}
STATUS_UNCHANGED = "unchanged"
STATUS_CHANGED = "changed"
STATUS_UNKNOWN = "unknown"
CALL_NO_BASIS = "no_basis"
CALL_CACHE_HIT = "cache_hit"


# ----- rate tables ---------------------------------------------------------------


@dataclass(frozen=True)
class Rate:
    unit: str
    usd: float


@dataclass(frozen=True)
class RateTable:
    id: str
    as_of: str
    digest: str
    rates: Mapping[str, Rate]
    source: str = ""


def parse_table(doc: Any, source: str = "<table>") -> RateTable:
    """A ``RateTable`` from a decoded JSON document, or ``RateTableError``."""

    def bad(why: str) -> RateTableError:
        return RateTableError(f"rate table {source}: {why}")

    if not isinstance(doc, Mapping):
        raise bad("must be a JSON object")
    table_id, as_of, raw = doc.get("id"), doc.get("as_of"), doc.get("rates")
    if not isinstance(table_id, str) or not table_id:
        raise bad("'id' must be a non-empty string")
    if not isinstance(as_of, str) or not as_of:
        raise bad("'as_of' must be a date string")
    if doc.get("currency", "USD") != "USD":
        raise bad("only USD rates are understood")
    if not isinstance(raw, Mapping):
        raise bad("'rates' must map model ids to {unit, usd}")
    rates = {}
    for model, entry in raw.items():
        unit: Any = entry.get("unit") if isinstance(entry, Mapping) else None
        usd: Any = entry.get("usd") if isinstance(entry, Mapping) else None
        if unit not in UNITS:
            raise bad(f"{model!r}: unit must be one of {', '.join(UNITS)}, got {unit!r}")
        if as_usd(usd) is None:
            raise bad(f"{model!r}: usd must be a finite non-negative number, got {usd!r}")
        rates[model] = Rate(unit, float(usd))
    content = {"id": table_id, "as_of": as_of, "rates": {m: vars(r) for m, r in rates.items()}}
    digest = canonical.PLAN_FORM.sha256(content)[:16]
    return RateTable(table_id, as_of, digest, rates, source)


def load_table(path: str | Path) -> RateTable:
    return _parse_bytes(Path(path), _read(Path(path)))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RateTableError(f"rate table {str(path)!r} cannot be read: {exc}") from None


def _parse_bytes(path: Path, raw: bytes) -> RateTable:
    try:
        doc = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise RateTableError(f"rate table {str(path)!r} is not JSON: {exc}") from None
    return parse_table(doc, repr(str(path)))


def shipped_rates_path() -> Path:
    return Path(str(resources.files("nw").joinpath("pricing_data")))


def _table_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix == ".json" and p.is_file())
    if path.is_file():
        return [path]
    raise RateTableError(f"rates path {str(path)!r} does not exist")


_CACHE: dict[str, tuple[tuple[tuple[str, bytes], ...], dict[str, RateTable]]] = {}
_CACHE_LOCK = threading.Lock()


def rate_tables(rates_path: str | Path | None = None) -> dict[str, RateTable]:
    """Tables by id from ``rates_path`` (a file or a folder of ``*.json``), else
    the shipped ones. The files are read on every call (they are small) and
    parsed again only when their bytes changed, so an edit takes effect at once."""
    path = Path(rates_path) if rates_path is not None else shipped_rates_path()
    files = _table_files(path)
    if not files:
        raise RateTableError(f"rates path {str(path)!r} holds no *.json rate table")
    contents = tuple((file, _read(file)) for file in files)
    stamp = tuple((str(file), raw) for file, raw in contents)
    key = str(path.resolve())
    with _CACHE_LOCK:
        cached = _CACHE.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    tables: dict[str, RateTable] = {}
    for file, raw in contents:
        table = _parse_bytes(file, raw)
        if table.id in tables:
            raise RateTableError(
                f"rate table id {table.id!r} is in both {tables[table.id].source} and "
                f"{table.source}; a basis must name exactly one table"
            )
        tables[table.id] = table
    with _CACHE_LOCK:
        _CACHE[key] = (stamp, tables)
    return tables


# ----- cost bases and pricers ----------------------------------------------------


@dataclass(frozen=True)
class CostBasis:
    pricer: str
    priced: str
    quantities: Mapping[str, Any] = field(default_factory=dict)
    table: str = ""
    table_version: str = ""

    @classmethod
    def from_dict(cls, doc: Any) -> CostBasis:
        """Parse a basis; ``Unpriceable`` when it is not one."""
        if not isinstance(doc, Mapping):
            raise Unpriceable("cost_basis is not a mapping")
        pricer, priced, qty = doc.get("pricer"), doc.get("priced"), doc.get("quantities", {})
        if not isinstance(pricer, str) or not isinstance(priced, str) or not priced:
            raise Unpriceable("cost_basis needs 'pricer' and 'priced' strings")
        if not isinstance(qty, Mapping):
            raise Unpriceable("cost_basis quantities is not a mapping")
        table, version = doc.get("table") or "", doc.get("table_version") or ""
        return cls(pricer, priced, dict(qty), str(table), str(version))

    def to_dict(self) -> dict[str, Any]:
        out = {"pricer": self.pricer, "priced": self.priced, "quantities": dict(self.quantities)}
        if self.table:
            out["table"] = self.table
        if self.table_version:
            out["table_version"] = self.table_version
        return out


@dataclass(frozen=True)
class Priced:
    usd: float
    table: str = ""
    table_version: str = ""


class Pricer(Protocol):
    def quote(self, basis: CostBasis) -> Priced:
        """Today's price of ``basis``; raise ``Unpriceable`` when there is none."""
        ...


class TablePricer:
    """Prices a basis against the loaded rate table its basis names."""

    def __init__(self, tables: Mapping[str, RateTable]):
        self.tables = tables

    def quote(self, basis: CostBasis) -> Priced:
        table = self.tables.get(basis.table)
        if table is None:
            raise Unpriceable(f"rate table {basis.table!r} is not loaded")
        rate = table.rates.get(basis.priced)
        if rate is None:
            raise Unpriceable(f"{basis.priced!r} is not in rate table {table.id!r}")
        name, per = UNITS[rate.unit]
        quantity = as_usd(basis.quantities.get(name))
        if quantity is None:
            raise Unpriceable(
                f"{basis.priced!r} is priced per {rate.unit} and the basis has no usable {name!r}"
            )
        count = as_usd(basis.quantities.get("count", 1))
        if count is None:
            raise Unpriceable("the basis's 'count' is not a non-negative number")
        return Priced(rate.usd * quantity / per * count, table.id, table.digest)


class FalawPricer:
    """Re-quotes a falaw-planned call through falaw's own published tables
    (its ``reprice.DFLT_PRICERS``); unknown when falaw is not installed."""

    def __init__(self, name: str):
        self.name = name

    def quote(self, basis: CostBasis) -> Priced:
        try:
            from falaw import plan as falaw_plan
            from falaw import reprice
        except ImportError:
            raise Unpriceable(
                "falaw is not installed (pip install 'nw-jobs[fal]'), so a falaw-priced "
                "call cannot be re-quoted"
            ) from None
        pricer = reprice.DFLT_PRICERS.get(self.name)
        if pricer is None:
            raise Unpriceable(f"this falaw has no {self.name!r} pricer")
        if basis.table != pricer.table:
            raise Unpriceable(
                f"the basis names table {basis.table!r}; falaw reads {pricer.table!r}"
            )
        try:
            usd = pricer.quote(falaw_plan.cost_basis_from_dict(basis.to_dict()))
        except Exception as exc:  # a pricer's failure is an unknown price, not a crash
            raise Unpriceable(f"falaw cannot price it: {exc}") from None
        if as_usd(usd) is None:
            raise Unpriceable(f"falaw has no price for {basis.priced!r}")
        return Priced(float(usd), pricer.table, pricer.version())


def default_pricers(rates_path: str | Path | None = None) -> dict[str, Pricer]:
    return {
        RATE_TABLE_PRICER: TablePricer(rate_tables(rates_path)),
        "model_catalogue": FalawPricer("model_catalogue"),
        "llm_rates": FalawPricer("llm_rates"),
    }


def quote_call(
    model: str,
    quantities: Mapping[str, Any],
    *,
    table: str | None = None,
    rates_path: str | Path | None = None,
) -> tuple[float, dict[str, Any]]:
    """(today's USD, the cost basis to stamp on the call) for a call being
    planned. ``table`` picks the table; by default the one table that has the
    model. ``Unpriceable`` when it cannot be priced."""
    tables = rate_tables(rates_path)
    if table is None:
        holding = [t.id for t in tables.values() if model in t.rates]
        if len(holding) != 1:
            where = "no loaded table" if not holding else f"tables {holding}"
            raise Unpriceable(f"{model!r} is in {where}; name the table")
        table = holding[0]
    basis = CostBasis(RATE_TABLE_PRICER, model, dict(quantities), table)
    priced = TablePricer(tables).quote(basis)
    stamped = CostBasis(basis.pricer, model, dict(quantities), priced.table, priced.table_version)
    return priced.usd, stamped.to_dict()


# ----- quoting a plan ------------------------------------------------------------


@dataclass(frozen=True)
class CallQuote:
    index: int
    tool: str
    application: str
    status: str
    """``unchanged`` | ``changed`` | ``unknown`` | ``no_basis`` | ``cache_hit``."""
    usd: float | None
    """Today's price; None when it cannot be re-quoted; 0.0 for a cache hit."""
    as_of_usd: float | None
    """The figure frozen at plan time (audit only)."""
    reason: str | None = None
    pricer: str | None = None
    table: str | None = None
    table_version_then: str | None = None
    table_version_now: str | None = None

    @property
    def billable(self) -> bool:
        return self.status != CALL_CACHE_HIT

    @property
    def basis_changed(self) -> bool:
        """The table's version moved between plan time and today."""
        return self.table_version_now is not None and (
            self.table_version_then != self.table_version_now
        )

    def to_dict(self) -> dict[str, Any]:
        return {**vars(self), "billable": self.billable, "basis_changed": self.basis_changed}


@dataclass(frozen=True)
class PlanQuote:
    status: str
    """``unchanged``: every billable call re-quotes to its frozen figure;
    ``changed``: all re-quoted, some differ; ``unknown``: some cannot be."""
    total_usd: float | None
    """Today's total of the billable calls; None when any cannot be re-quoted."""
    as_of_total_usd: float | None
    """The frozen plan-time total, for audit; never a current price."""
    calls: tuple[CallQuote, ...] = ()

    @property
    def unknown_calls(self) -> int:
        return sum(1 for c in self.calls if c.billable and c.usd is None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "total_usd": self.total_usd,
            "as_of_total_usd": self.as_of_total_usd,
            "unknown_calls": self.unknown_calls,
            "calls": [c.to_dict() for c in self.calls],
        }


def current_quote(
    plan: Any,
    *,
    rates_path: str | Path | None = None,
    pricers: Mapping[str, Pricer] | None = None,
) -> PlanQuote:
    """Today's quote for ``plan`` (a plan dict or a falaw.Plan).

    ``pricers`` are added over the shipped ones (same name: theirs wins).
    Raises ``PlanError`` when the plan cannot be read, and ``RateTableError``
    when the configured tables cannot; an unpriceable call is never an
    exception, it is an unknown quote.
    """
    read = plans.read_plan(plan)
    active: dict[str, Pricer] = {**default_pricers(rates_path), **(pricers or {})}
    calls = tuple(_quote_one(i, call, active) for i, call in enumerate(read["calls"]))
    billable = [c for c in calls if c.billable]
    known = [c.usd for c in billable if c.usd is not None]
    total = math.fsum(known) if len(known) == len(billable) else None
    frozen = [c.as_of_usd for c in billable if c.as_of_usd is not None]
    as_of = math.fsum(frozen) if len(frozen) == len(billable) else None
    if total is None:
        status = STATUS_UNKNOWN
    elif any(c.status == STATUS_CHANGED for c in billable):
        status = STATUS_CHANGED
    else:
        status = STATUS_UNCHANGED
    return PlanQuote(status, total, as_of, calls)


def _quote_one(index: int, call: Mapping[str, Any], pricers: Mapping[str, Pricer]) -> CallQuote:
    head = {"index": index, "tool": call["tool"], "application": call["application"]}
    as_of = as_usd(call.get("estimated_cost_usd"))
    if call.get("cache_status") == "hit":
        return CallQuote(**head, status=CALL_CACHE_HIT, usd=0.0, as_of_usd=0.0)
    raw = call.get("cost_basis")
    if raw is None:
        return CallQuote(
            **head,
            status=CALL_NO_BASIS,
            usd=None,
            as_of_usd=as_of,
            reason="the call carries no cost_basis, so it cannot be re-quoted",
        )
    try:
        basis = CostBasis.from_dict(raw)
    except Unpriceable as exc:
        return CallQuote(**head, status=STATUS_UNKNOWN, usd=None, as_of_usd=as_of, reason=str(exc))
    where: dict[str, Any] = {
        "pricer": basis.pricer,
        "table": basis.table or None,
        "table_version_then": basis.table_version or None,
    }
    pricer = pricers.get(basis.pricer)
    try:
        if pricer is None:
            raise Unpriceable(f"no pricer named {basis.pricer!r}")
        priced = pricer.quote(basis)
        usd = as_usd(priced.usd)
        if usd is None:
            raise Unpriceable(f"pricer {basis.pricer!r} returned {priced.usd!r}")
    except Exception as exc:  # a pricer's bug is an unknown price, never a crashed quote
        if not isinstance(exc, Unpriceable):
            log.warning("pricer %r failed on call %d", basis.pricer, index, exc_info=True)
            exc = Unpriceable(f"pricer {basis.pricer!r} failed ({type(exc).__name__})")
        return CallQuote(
            **head, status=STATUS_UNKNOWN, usd=None, as_of_usd=as_of, reason=str(exc), **where
        )
    same = as_of is not None and math.isclose(usd, as_of, rel_tol=1e-9, abs_tol=1e-12)
    return CallQuote(
        **head,
        status=STATUS_UNCHANGED if same else STATUS_CHANGED,
        usd=usd,
        as_of_usd=as_of,
        pricer=basis.pricer,
        table=priced.table or basis.table or None,
        table_version_then=where["table_version_then"],
        table_version_now=priced.table_version or None,
    )


def as_usd(value: Any) -> float | None:
    """A finite non-negative number as float, else None (bools are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value >= 0 else None
