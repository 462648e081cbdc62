"""This process's runtimes: one per store and execution config, made on first
need by the write paths (``enqueue``, the worker), never by the read paths,
and seen as one (``LocalRuntimes``) by a reader asking whether this process
holds a job."""

from __future__ import annotations

import threading
from collections.abc import Callable

from nw.jobs.core.model import JobsConfig
from nw.jobs.execution.runtime import Runtime
from nw.jobs.stores.base import JobStore

#: Per store location, one runtime per distinct execution config (pool size,
#: beat timing, time limits, clock): a later call with other settings gets its
#: own runtime instead of silently inheriting the first call's.
_RUNTIMES: dict[tuple[str, str], dict[tuple, Runtime]] = {}
_RUNTIMES_LOCK = threading.Lock()
_RUNTIME_FIELDS = (
    "max_concurrent",
    "heartbeat_interval_s",
    "heartbeat_stale_s",
    "job_timeout_s",
    "cancel_on_timeout",
    "sample_window_k",
    "clock",
)


def _config_key(config: JobsConfig) -> tuple:
    return tuple(getattr(config, name) for name in _RUNTIME_FIELDS)


def runtime_for(
    key: tuple[str, str], make_store: Callable[[], JobStore], config: JobsConfig
) -> Runtime:
    with _RUNTIMES_LOCK:
        group = _RUNTIMES.setdefault(key, {})
        rt = group.get(_config_key(config))
        if rt is None:
            rt = group[_config_key(config)] = Runtime(make_store(), config)
        return rt


class LocalRuntimes:
    """Every runtime of this process on one store, seen as one: does any hold a job?"""

    def __init__(self, runtimes: list[Runtime]):
        self.runtimes = runtimes

    def holds(self, job_id: str) -> bool:
        return any(rt.holds(job_id) for rt in self.runtimes)

    def local_cancel(self, job_id: str) -> None:
        for rt in self.runtimes:
            rt.local_cancel(job_id)

    def is_finishing(self, job_id: str) -> bool:
        return any(rt.is_finishing(job_id) for rt in self.runtimes)

    def wait_idle(self, timeout: float | None = None) -> bool:
        return all(rt.wait_idle(timeout) for rt in self.runtimes)


def existing_runtime(key: tuple[str, str]) -> LocalRuntimes | None:
    with _RUNTIMES_LOCK:
        group = list(_RUNTIMES.get(key, {}).values())
    return LocalRuntimes(group) if group else None


def shutdown_runtimes(*, wait: bool = True) -> None:
    """Stop every runtime of this process (tests, and orderly exits)."""
    with _RUNTIMES_LOCK:
        runtimes = [rt for group in _RUNTIMES.values() for rt in group.values()]
        _RUNTIMES.clear()
    for rt in runtimes:
        rt.close(wait=wait)
