"""What a store keeps of pipelines, behind one small contract with a module per
backend (``pipelines_sqlite``, ``pipelines_postgres``): the links of new jobs
written in their create's transaction, a pipeline's row and steps, the
pipeline a job belongs to. Releasing and cancelling dependents happens in the
transaction that ends a job (the embedded store's ``settle``, PostgreSQL's
trigger), never here."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nw.jobs.core.pipelines import Edge
from nw.jobs.stores.base import JobStore


@dataclass(frozen=True)
class Links:
    """What a create writes beside its new jobs: the pipeline's row (None for
    ``enqueue(after=...)`` or a retry), its steps ``(name, job id)``, the edges,
    and the new jobs that wait (created unclaimable: their links decide, under
    the create's lock, which start now, wait, or are stopped already)."""

    pipeline: dict[str, Any] | None
    steps: Sequence[tuple[str, str]]
    edges: Sequence[Edge]
    waiting: Sequence[str]
    now: float
    released: list[str] = field(default_factory=list)
    """Filled by the write: the waiting jobs that were free to start at once."""


class PipelineStore(ABC):
    """One project's pipelines in its job store."""

    @abstractmethod
    def linker(self, links: Links) -> Callable[[Any], None]:
        """``create_many``'s ``also``: writes ``links`` on the create's connection,
        inside its transaction (an exception rolls the whole create back)."""

    @abstractmethod
    def pipeline(self, pipeline_id: str) -> dict[str, Any] | None:
        """``{pipeline_id, created_at, label, actor_id, doc}``, or None."""

    @abstractmethod
    def steps(self, pipeline_id: str) -> list[tuple[str, str]]:
        """``(step, job id)`` of each step, by name."""

    @abstractmethod
    def cancel(self, pipeline_id: str, *, now: float) -> list[str]:
        """Cancel every unfinished step as ``request_cancel`` cancels one, in a
        bounded number of statements: a queued step (waiting or claimable)
        ends cancelled at once, a running one is flagged and stops as its
        outcome says. The ids of the steps it cancelled (their process, if it
        holds them, lets them go: ``Runtime.local_cancel``)."""


def pipelines_of(store: JobStore) -> PipelineStore:
    """The store's pipelines, by its backend."""
    from nw.jobs.stores.sqlite import SqliteJobStore

    if isinstance(store, SqliteJobStore):
        from nw.jobs.stores.pipelines_sqlite import SqlitePipelines

        return SqlitePipelines(store)
    from nw.jobs.stores.pipelines_postgres import PostgresPipelines
    from nw.jobs.stores.postgres import PostgresJobStore

    if isinstance(store, PostgresJobStore):
        return PostgresPipelines(store)
    raise TypeError(f"{type(store).__name__} keeps no pipelines")
