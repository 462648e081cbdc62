"""The cost gate: a job's identity basis, its quoted cost and the approval rule.

``quote_for`` reads the params once and answers everything ``enqueue`` and
``estimate`` need: the dedup basis (the plan hash when a plan is given, else
the params hash), today's estimated cost, and whether it needs approval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nw.jobs import ids
from nw.jobs.model import JobsConfig
from nw.project import Project


@dataclass(frozen=True)
class Quote:
    identity: str
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

    def gate(self, store: Any, *, approved: bool, config: JobsConfig) -> None:
        """Refuse (before any write) what a budget does not allow."""
        return None


def _usd(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def quote_for(
    project: Project,
    kind: str,
    params: dict[str, Any],
    config: JobsConfig,
    *,
    for_estimate: bool = False,
) -> Quote:
    estimated = _usd(params.get("estimated_usd"))
    return Quote(
        identity=ids.params_hash(params),
        estimated_usd=estimated,
        has_unknown_costs=estimated is None,
    )
