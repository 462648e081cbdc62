"""``DurationLearningMiddleware``: learns render wall-times per ETA key (an au Middleware).

Self-timed with a monotonic clock from ``before_compute`` to ``after_compute``:
au's ``result.duration`` is near zero under a thread backend, which builds the
COMPLETED result at the end. A cache hit is never learned (it would drag the
median to zero). The specific keys get the whole-job time; the coarse
``output_kind`` key means seconds per unit and is written only by a job that
declared ``units`` (as elapsed / units) or whose only key is the coarse one,
so a 4-image job never corrupts the single-image bucket (a job with specific
keys that forgot ``units`` costs a cold coarse bucket, never a corrupted one).
A job whose render reported progress also teaches, per specific key and
tenth of reported progress, how far through its time it really was
(``eta.progress_key``), so a progress bar that runs ahead of or behind the
clock is read for what it means (see eta.py).

Samples go through ``record`` (the runtime's ``store.add_samples``, which
keeps the newest ``sample_window_k`` per key); the order they are kept in,
newest last, is what the predictor's drift handling reads.

Its ``started`` map (key -> monotonic start) is the in-process liveness
signal the reaper consults: a job in it is held by a thread of this process.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from contextlib import AbstractContextManager
from typing import Any

from au import ComputationResult, ComputationStatus, Middleware

from nw.errors import InvalidType
from nw.jobs.core import eta
from nw.jobs.core.model import DEFAULT_CONFIG, JobsConfig


def samples_to_learn(meta: Mapping[str, Any], elapsed_s: float) -> dict[str, float]:
    """Which keys learn what from one finished job (pure).

    ``meta`` carries the job's ``eta_candidates``, ``output_kind``, ``units``
    and ``cached``. Nothing is learned from a cache hit or a time that is not
    a finite, non-negative number.
    """
    if meta.get("cached") or not _valid_seconds(elapsed_s):
        return {}
    candidates = [k for k in meta.get("eta_candidates") or () if isinstance(k, str) and k]
    coarse = meta.get("output_kind")
    units = meta.get("units")
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        units = None
    specific = [k for k in candidates if k != coarse]
    out = {k: float(elapsed_s) for k in specific}
    if coarse and coarse in candidates:
        if units:
            out[coarse] = float(elapsed_s) / units
        elif not specific:
            out[coarse] = float(elapsed_s)
    out.update(progress_samples(specific, meta.get("progress")))
    return out


def progress_samples(keys: list[str], points: Any) -> dict[str, float]:
    """Calibration of reported progress: per specific key and progress bin, the last
    report's (share of the job's time elapsed) / (reported fraction).

    ``points`` are ``[time_share, fraction]`` pairs in report order, from the
    job's event sink; nonsense pairs are skipped.
    """
    per_bin: dict[int, float] = {}
    for point in points if isinstance(points, (list, tuple)) else ():
        if not (isinstance(point, (list, tuple)) and len(point) == 2):
            continue
        share, fraction = point
        if not (_valid_seconds(share) and _valid_seconds(fraction)):
            continue
        if 0 < share <= 1 and 0 < fraction <= 1:
            per_bin[eta.progress_bin(fraction)] = share / fraction
    return {eta.progress_key(k, b): rho for k in keys for b, rho in per_bin.items()}


def _valid_seconds(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


class DurationLearningMiddleware(Middleware):
    """Two forms. The runtime's: ``record`` takes ``{key: seconds}`` and the
    job's ETA fields come in ``result.metadata``. The seed's: ``durations`` is
    any ``MutableMapping[str, list[float]]`` (a dict, a ``dol`` store) that
    learns the newest ``config.sample_window_k`` samples per key, ``index``
    maps a job id (the au key) to its record, read for the ETA fields a plain
    au backend does not put in ``result.metadata``, and ``lock`` (optional)
    guards the read-append-write of ``durations`` when it is shared.
    """

    def __init__(
        self,
        *,
        record: Callable[[dict[str, float]], None] | None = None,
        durations: MutableMapping[str, list[float]] | None = None,
        index: Mapping[str, Mapping[str, Any]] | None = None,
        lock: AbstractContextManager[Any] | None = None,
        config: JobsConfig = DEFAULT_CONFIG,
        clock: Callable[[], float] = time.monotonic,
    ):
        if (record is None) == (durations is None):
            raise InvalidType("DurationLearningMiddleware takes record= or durations=, exactly one")
        if durations is not None:
            record = _appender(durations, lock or threading.Lock(), config.sample_window_k)
        assert record is not None  # one of the two, checked above
        self._record = record
        self._index = index
        self._config = config
        self._clock = clock
        self._lock = threading.Lock()
        self.started: dict[str, float] = {}

    def before_compute(self, func: Callable, args: tuple, kwargs: dict, key: str) -> None:
        with self._lock:
            self.started[key] = self._clock()

    def restart(self, key: str) -> None:
        """The body starts only now (it waited for a delay or a limit on its thread)."""
        with self._lock:
            if key in self.started:
                self.started[key] = self._clock()

    def is_running(self, key: str) -> bool:
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
        learned = samples_to_learn(self._meta(key, result), elapsed)
        if learned:
            self._record(learned)

    def on_error(self, key: str, error: Exception) -> None:
        self._stop(key)

    def _meta(self, key: str, result: ComputationResult) -> Mapping[str, Any]:
        """The job's ETA fields: the result's metadata, else its index record
        (read now, so a ``cached`` flag mirrored during the run counts)."""
        if result.metadata or self._index is None:
            return result.metadata or {}
        found = self._index.get(key)
        return found if isinstance(found, Mapping) else {}


def _appender(
    durations: MutableMapping[str, list[float]], lock: AbstractContextManager[Any], window: int
) -> Callable[[dict[str, float]], None]:
    """``record`` for a plain mapping: read, append, keep the newest ``window``,
    write back (a ``dol`` store hands out copies, so appending in place is lost)."""

    def record(learned: dict[str, float]) -> None:
        with lock:
            for key, seconds in learned.items():
                kept = list(durations.get(key) or ())
                durations[key] = [*kept, seconds][-window:]

    return record
