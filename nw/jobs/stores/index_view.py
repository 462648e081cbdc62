"""The index of a job store as a dol mapping (job id -> record dict).

Its own module so that importing a store does not import dol (40 ms of a
worker's start-up); ``JobStore.index`` imports it when asked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from dol.base import KvPersister

if TYPE_CHECKING:
    from nw.jobs.stores.base import JobStore


class IndexView(KvPersister):
    """The index as a dol mapping: job id -> record dict (newest first)."""

    def __init__(self, store: JobStore):
        self._store = store

    def __getitem__(self, job_id: str) -> dict[str, Any]:
        row = self._store.get(job_id)
        if row is None:
            raise KeyError(job_id)
        return row.record

    def __setitem__(self, job_id: str, record: Mapping[str, Any]) -> None:
        self._store.put_record({**record, "job_id": job_id})

    def __delitem__(self, job_id: str) -> None:
        if self._store.get(job_id) is None:
            raise KeyError(job_id)
        self._store.delete(job_id)

    def __iter__(self) -> Iterator[str]:
        return self._store.iter_ids()

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and self._store.get(job_id) is not None
