"""``DurationLearningMiddleware``: learns render wall-times per ETA key (an au Middleware).

Self-timed with a monotonic clock from ``before_compute`` to ``after_compute``:
au's ``result.duration`` is near zero under a thread backend, which builds the
COMPLETED result at the end. A cache hit is never learned (it would drag the
median to zero). The specific keys get the whole-job time; the coarse
``output_kind`` key means seconds per unit and is written only by a job that
declared ``units`` (as elapsed / units) or whose only key is the coarse one,
so a 4-image job never corrupts the single-image bucket.

Its ``started`` map (key -> monotonic start) is the in-process liveness
signal the reaper consults: a job in it is held by a thread of this process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from au import ComputationResult, ComputationStatus, Middleware

from nw.jobs.model import DEFAULT_CONFIG, JobsConfig


def samples_to_learn(meta: Mapping[str, Any], elapsed_s: float) -> dict[str, float]:
    """Which keys learn what from one finished job (pure)."""
    if meta.get("cached"):
        return {}
    candidates = list(meta.get("eta_candidates") or ())
    coarse = meta.get("output_kind")
    units = meta.get("units")
    specific = [k for k in candidates if k != coarse]
    out = {k: elapsed_s for k in specific}
    if coarse and coarse in candidates:
        if units:
            out[coarse] = elapsed_s / units
        elif not specific:
            out[coarse] = elapsed_s
    return out


class DurationLearningMiddleware(Middleware):
    def __init__(
        self,
        *,
        record: Callable[[dict[str, float]], None],
        config: JobsConfig = DEFAULT_CONFIG,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._record = record
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self.started: dict[str, float] = {}

    def before_compute(self, func: Callable, args: tuple, kwargs: dict, key: str) -> None:
        with self._lock:
            self.started[key] = self._clock()

    def holds(self, key: str) -> bool:
        with self._lock:
            return key in self.started

    def _stop(self, key: str) -> float | None:
        with self._lock:
            start = self.started.pop(key, None)
        return None if start is None else self._clock() - start

    def after_compute(self, key: str, result: ComputationResult) -> None:
        elapsed = self._stop(key)
        if elapsed is None or result.status is not ComputationStatus.COMPLETED:
            return
        learned = samples_to_learn(result.metadata or {}, elapsed)
        if learned:
            self._record(learned)

    def on_error(self, key: str, error: Exception) -> None:
        self._stop(key)
