"""``GET /api/budgets``: each served project's stored budgets (spent of cap) and
approval policy, for the console's budget panel; and the budget and
quote-against-bill gauges ``/metrics`` adds (``BudgetsCollector``).

Read-only: budgets are set with ``jobs.set_budget`` or ``nw-jobs budget set``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.requests import Request
from starlette.routing import Route

from nw.jobs.api import accuracy, budgets
from nw.jobs.core.model import JobsConfig
from nw.jobs.web import state
from nw.jobs.web.responses import JSONResponse
from nw.project import Project

PREFIX = "nw_jobs"


def project_budgets(project: Project, config: JobsConfig) -> dict[str, Any]:
    return {
        "root": str(project.root),
        "name": project.root.name,
        "title": project.title,
        "budgets": budgets.list_budgets(project, config=config),
        "approval": budgets.get_approval(project, config=config),
    }


def list_all(request: Request) -> JSONResponse:
    config = state.config(request)
    picked = state.projects(request).pick(request.query_params.get("project") or None)
    return JSONResponse({"projects": [project_budgets(p, config) for p in picked]})


class BudgetsCollector(Collector):
    """Per served project: each budget's cap, spend and what is left, and the
    quote-against-bill ratio by kind (median billed/quoted of finished jobs)."""

    def __init__(self, projects: list[Project], config: JobsConfig):
        self.projects, self.config = projects, config

    def collect(self) -> Iterator[Metric]:
        labels = ["project", "budget", "scope"]
        cap = GaugeMetricFamily(f"{PREFIX}_budget_usd", "A stored budget's cap", labels=labels)
        spent = GaugeMetricFamily(
            f"{PREFIX}_budget_spent_usd",
            "What a stored budget counts in its current window (actuals plus live estimates)",
            labels=labels,
        )
        left = GaugeMetricFamily(
            f"{PREFIX}_budget_remaining_usd",
            "What is left under a stored budget in its current window",
            labels=labels,
        )
        ratio = GaugeMetricFamily(
            f"{PREFIX}_cost_actual_to_quote_ratio",
            "Median billed/quoted of the finished jobs of a kind (1: quotes are right)",
            labels=["project", "kind"],
        )
        over = GaugeMetricFamily(
            f"{PREFIX}_cost_over_quote_usd",
            "Dollars billed above the quotes (negative: under) of the finished jobs of a kind",
            labels=["project", "kind"],
        )
        for project in self.projects:
            name = str(project.root)
            for b in budgets.list_budgets(project, config=self.config):
                key = [name, b["key"], b["scope"]]
                cap.add_metric(key, b["usd"])
                spent.add_metric(key, b["spent_usd"])
                left.add_metric(key, b["remaining_usd"])
            for row in accuracy.cost_accuracy(project, config=self.config):
                if row["median_ratio"] is not None:
                    ratio.add_metric([name, row["kind"]], row["median_ratio"])
                over.add_metric([name, row["kind"]], row["over_usd"])
        yield from (cap, spent, left, ratio, over)


routes = [Route("/api/budgets", list_all, methods=["GET"])]
