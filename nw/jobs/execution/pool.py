"""The bounded pool bodies run on: au's thread backend, at most ``max_workers``
bodies at once, the best waiting launch first (``PooledThreadBackend``); and
the ``Answer`` a worker's body hands back, which lets its slot go."""

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
IDLE_S = 0.1
"""How long a pool thread with nothing to run waits for a launch before it
goes back to the pool (at most this long, an exiting process waits for it)."""


class Answer:
    """A handed-over attempt's answer (``metadata["written"]``): settled once
    the store's answer is recorded on the launch; a callback added runs then,
    on the settling thread (at once if it already is). What the pool waits on
    to let the slot go: a future's interface without its condition, one less
    per job."""

    __slots__ = ("_callbacks", "_done", "_lock")

    def __init__(self) -> None:
        self._callbacks: list[Callable[[Answer], None]] = []
        self._done = False
        self._lock = threading.Lock()

    def done(self) -> bool:
        return self._done

    def add_done_callback(self, fn: Callable[[Answer], None]) -> None:
        with self._lock:
            if not self._done:
                self._callbacks.append(fn)
                return
        self._call(fn)

    def set_result(self, _result: None = None) -> None:
        with self._lock:
            self._done = True
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            self._call(fn)

    def _call(self, fn: Callable[[Answer], None]) -> None:
        try:
            fn(self)
        except Exception:  # as a future's callback: logged, the others still run
            log.exception("a callback on a job's answer failed")


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
        self._ready = threading.Condition(self._waiting_lock)
        """Notified when a launch waits, or the pool shuts down."""
        self._arrivals = itertools.count()
        self._idle = 0
        """Serving loops waiting for a launch (``_next``)."""
        self._coming = 0
        """Serving loops handed to the pool, not yet serving."""
        self._loops = 0
        """Serving loops alive: coming, idle, or running a body. Counts to
        decide whether to hand the pool another loop; what bounds the bodies
        running at once is the pool's own ``max_workers`` threads."""
        self._closing = False

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
        waiting (FIFO within a priority), not simply the oldest. A thread
        that ran a body serves the next waiting launch itself, and waits
        ``IDLE_S`` for one before it goes back to the pool: a burst of
        launches is not a pool task (a future, a work item) each."""
        entry = (-int(priority), next(self._arrivals), (func, args, kwargs, key))
        with self._ready:
            if self._closing:  # as the pool itself would say
                raise RuntimeError("cannot schedule new futures after shutdown")
            heapq.heappush(self._waiting, entry)
            if self._idle:
                self._ready.notify()
            serve = (
                self._idle + self._coming < len(self._waiting) and self._loops < self.max_workers
            )  # else a loop takes it: an idle one, one coming, or one whose body ends
            if serve:
                self._coming += 1
                self._loops += 1
        if not serve:
            return
        try:
            self._pool.submit(self._next)
        except BaseException:
            # Refused (a pool shut down), or queued but no new thread could
            # start: taken back, and the caller hears it (and fails the job);
            # a pool task queued anyway finds one launch fewer. Unless a pool
            # thread took it meanwhile: then it runs, and was launched.
            with self._ready:
                self._coming = max(self._coming - 1, 0)
                self._loops = max(self._loops - 1, 0)
                try:
                    self._waiting.remove(entry)
                except ValueError:
                    return
                heapq.heapify(self._waiting)
            raise

    def _next(self) -> None:
        """A loop serving the pool, on one of its threads: the best waiting
        launch, then the next, until none has come for ``IDLE_S``."""
        with self._ready:
            self._coming = max(self._coming - 1, 0)
        while True:
            with self._ready:
                if not self._waiting and not self._closing:
                    self._idle += 1
                    try:
                        self._ready.wait(IDLE_S)
                    finally:
                        self._idle -= 1
                if not self._waiting:  # back to the pool (a launch now hands it another)
                    self._loops = max(self._loops - 1, 0)
                    return
                _, _, (func, args, kwargs, key) = heapq.heappop(self._waiting)
            try:
                self._work(func, args, kwargs, key)
            except Exception:  # the middleware failed around a body: the loop goes on
                log.exception("job %s: the pool's middleware failed", key)

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
        """Stop serving: ``wait``, once every waiting launch has run; else the
        launches still waiting for a thread are dropped."""
        with self._ready:
            self._closing = True
            if not wait:
                self._waiting.clear()
            self._ready.notify_all()
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
