"""``GET /metrics``: the served projects in the Prometheus text format.

Through ``prometheus_client`` (its exposition format and escaping, not ours):
each scrape builds a fresh registry from ``console.metrics`` per project, so
nothing is kept between scrapes and every figure is the store's. Behind the
same guards as every other route (a scraper sends the bearer token).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from nw.jobs.api import console
from nw.jobs.core.model import JobsConfig
from nw.jobs.web import state
from nw.jobs.web.routes_budgets import BudgetsCollector
from nw.project import Project

PREFIX = "nw_jobs"


class ProjectsCollector(Collector):
    """Every metric of the served projects, read when collected."""

    def __init__(self, projects: list[Project], config: JobsConfig):
        self.projects, self.config = projects, config

    def collect(self) -> Iterator[Metric]:
        queued = GaugeMetricFamily(
            f"{PREFIX}_queued", "Jobs waiting to run (queue depth)", labels=["project", "kind"]
        )
        running = GaugeMetricFamily(
            f"{PREFIX}_running",
            "Jobs running (cancelling ones included)",
            labels=["project", "kind"],
        )
        parked = GaugeMetricFamily(
            f"{PREFIX}_parked",
            "Running jobs parked on a provider's queue (no worker slot held), by kind",
            labels=["project", "kind"],
        )
        finished = GaugeMetricFamily(
            f"{PREFIX}_finished",
            "Finished jobs by status and grade (pruned ones included; a retry moves a job"
            " back to live)",
            labels=["project", "status", "grade"],
        )
        spend = GaugeMetricFamily(
            f"{PREFIX}_spend_usd",
            "Actual spend of jobs finished in the window (today, or the last 7 UTC days)",
            labels=["project", "window"],
        )
        committed = GaugeMetricFamily(
            f"{PREFIX}_committed_spend_usd",
            "What the budget counts: actual spend plus the estimates of live jobs",
            labels=["project"],
        )
        lower = GaugeMetricFamily(
            f"{PREFIX}_spend_is_lower_bound",
            "1 when a spend figure may be higher (an unknown or unreported cost)",
            labels=["project"],
        )
        workers = GaugeMetricFamily(
            f"{PREFIX}_workers", "Announced workers by state", labels=["project", "state"]
        )
        duration = HistogramMetricFamily(
            f"{PREFIX}_job_duration_seconds",
            "Run time of finished jobs by kind (the jobs the store holds)",
            labels=["project", "kind"],
        )
        for project in self.projects:
            name = str(project.root)
            data = console.metrics(project, config=self.config)
            for kind, by in sorted(data["live"].items()):
                queued.add_metric([name, kind], by.get("queued", 0))
                running.add_metric([name, kind], by.get("running", 0) + by.get("cancelling", 0))
                parked.add_metric([name, kind], by.get("parked", 0))
            for (status, grade), n in sorted(data["finished"].items()):
                finished.add_metric([name, status, grade], n)
            for window in ("today", "week"):
                spend.add_metric([name, window], data["totals"]["spend"][window]["usd"])
            committed.add_metric([name], data["spend"]["total_usd"])
            lower.add_metric([name], 1.0 if data["spend"]["is_lower_bound"] else 0.0)
            for state_ in ("live", "lost"):
                n = sum(1 for w in data["workers"] if w["state"] == state_)
                workers.add_metric([name, state_], n)
            for kind, d in sorted(data["durations"].items()):
                buckets = [(_le(b), n) for b, n in sorted(d["buckets"].items())]
                buckets.append(("+Inf", d["count"]))
                duration.add_metric([name, kind], buckets, sum_value=d["seconds"])
        yield from (queued, running, parked, finished, spend, committed, lower, workers, duration)


def _le(bound: float) -> str:
    return f"{bound:g}"


async def metrics(request: Request) -> Response:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProjectsCollector(state.projects(request).all, state.config(request)))
    registry.register(BudgetsCollector(state.projects(request).all, state.config(request)))
    body = await run_in_threadpool(generate_latest, registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


routes = [Route("/metrics", metrics, methods=["GET"])]
