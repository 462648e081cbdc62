"""A synchronous store and a fake clock, for deciding code driven on the test's thread.

``store`` (the root conftest's) is a real backend (the SQLite file, then PostgreSQL), called
directly: no runtime, no worker, no polling. ``clock`` is the only time the code sees.
"""

from __future__ import annotations

import pytest

T0 = 1_700_000_000.0


class FakeClock:
    """``JobsConfig.clock``: time moves only when the test says so."""

    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now


@pytest.fixture
def clock():
    return FakeClock()


def a_record(job_id: str, *, at: float = T0, kind: str = "render", **extra) -> dict:
    """A queued job's record as ``enqueue`` writes it (the fields the core reads)."""
    rec = {
        "job_id": job_id,
        "kind": kind,
        "label": kind,
        "idempotency_key": f"key-{job_id}",
        "params": {"n": 1},
        "created_at": at,
        "started_at": None,
        "finished_at": None,
        "heartbeat_at": None,
        "attempt": 0,
        "max_attempts": 1,
        "cancel_requested": False,
        "runner": "worker",
        "runner_id": None,
        "retryable": False,
        "run_id": f"run-{job_id}",
        "actor": None,
        "estimated_usd": None,
        "eta_candidates": [],
        "output_kind": None,
        "units": None,
        "expected_cache_hit": False,
    }
    rec.update(extra)
    return rec


@pytest.fixture
def claimed(store, clock):
    """``claimed(job_id, **record fields)``: the job created claimable and claimed
    by runner ``w1`` at the clock's time, as a worker would hold it."""

    def make(job_id: str, **extra):
        store.create(a_record(job_id, at=clock.now, **extra), claimable=True)
        (row,) = store.claim([extra.get("kind", "render")], now=clock.now, runner_id="w1")
        return row

    return make
