"""The bounded pool bodies run on: au's thread backend, at most ``max_workers``
bodies at once, the best waiting launch first (``PooledThreadBackend``)."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from au import ComputationResult, ComputationStatus, ComputationStore, Middleware, ThreadBackend

log = logging.getLogger("nw.jobs")


class PooledThreadBackend(ThreadBackend):
    """au's thread backend, bounded: at most ``max_workers`` bodies at once.

    Its ``store`` is the job store's au ``ComputationStore`` (``StatusView``),
    the single source of truth for a run's status. The launched callable
    writes its own (fenced) terminal state through the job store, so this
    backend only runs the middleware around it and never writes the store
    itself (au's bare ``store[key] = COMPLETED`` would skip the fence).
    """

    def __init__(
        self,
        store: ComputationStore,
        middleware: list[Middleware],
        max_workers: int,
        done: Callable[[str, tuple], None] | None = None,
    ):
        super().__init__(store=store, middleware=middleware)
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="nw-job")
        self.max_workers = max_workers
        self._done = done
        # Launches waiting for a thread, best first: (-priority, arrival, task).
        self._waiting: list[tuple[int, int, tuple]] = []
        self._waiting_lock = threading.Lock()
        self._arrivals = itertools.count()

    def launch(
        self,
        func: Callable,
        args: tuple,
        kwargs: dict,
        key: str,
        store: Any = None,
        priority: int = 0,
    ) -> None:
        """Queue a launch; the next free thread runs the highest ``priority``
        waiting (FIFO within a priority), not simply the oldest."""
        entry = (-int(priority), next(self._arrivals), (func, args, kwargs, key))
        with self._waiting_lock:
            heapq.heappush(self._waiting, entry)
        try:
            self._pool.submit(self._next)
        except BaseException:
            # Refused (a pool shut down), or queued but no new thread could
            # start: taken back, and the caller hears it (and fails the job);
            # a pool task queued anyway finds one launch fewer. Unless a pool
            # thread took it meanwhile: then it runs, and was launched.
            with self._waiting_lock:
                try:
                    self._waiting.remove(entry)
                except ValueError:
                    return
                heapq.heapify(self._waiting)
            raise

    def _next(self) -> None:
        with self._waiting_lock:  # one pool task per launch (one taken back: none left)
            if not self._waiting:
                return
            _, _, (func, args, kwargs, key) = heapq.heappop(self._waiting)
        self._work(func, args, kwargs, key)

    def _work(self, func: Callable, args: tuple, kwargs: dict, key: str) -> None:
        written = None
        try:
            self._run_middleware_before(func, args, kwargs, key)
            try:
                result: ComputationResult = func(*args, **kwargs)
            except BaseException as exc:  # the runners never raise; belt and braces
                log.exception("job %s: runner failed", key)
                error = exc if isinstance(exc, Exception) else RuntimeError(repr(exc))
                self._run_middleware_error(key, error)
                return
            written = (result.metadata or {}).pop("written", None)
            if result.status is ComputationStatus.COMPLETED:
                self._run_middleware_after(key, result)
            else:
                self._run_middleware_error(key, result.error or RuntimeError("failed"))
        finally:
            # After the middleware (learning is part of the job), and once the
            # outcome is committed: the slot is let go only then (the callback
            # runs at once if it is, else on the thread that commits it).
            if self._done is not None:
                done = self._done
                if written is None:
                    done(key, args)
                else:
                    written.add_done_callback(lambda _w: done(key, args))

    def shutdown(self, wait: bool = True) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
