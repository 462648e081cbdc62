"""The job API for an event loop: the same calls, awaitable, never blocking it.

Each call takes the same arguments and returns the same values as its twin
in ``nw.jobs``. A store round trip (a file lock, a network query) runs on a
small pool of this module's own threads, never on the loop's thread and
never in the loop's default executor (which the app may need for its own
work). ``wait`` and ``watch`` hold no thread while they wait: the store's
change signal sets an ``asyncio.Event`` through the loop
(``call_soon_threadsafe``), and only the reads run on the pool. No event
loop is created here and nothing async is wrapped in sync.

    from nw.jobs import aio

    job = await aio.enqueue(project, "panel.animate", params)
    async for seen in aio.watch(project, job.job_id):
        ...  # send seen's progress to the browser
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from nw.jobs.api import facade, pipeline_retry, pipelines, waiting
from nw.jobs.api.handles import ProjectLike
from nw.jobs.core.model import DEFAULT_CONFIG, Job, JobsConfig

T = TypeVar("T")

#: Threads that run the store's round trips for every loop of the process.
THREADS = 8

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="nw-aio")
        return _pool


async def _run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_executor(), functools.partial(fn, *args, **kwargs))


def _twin(fn: Callable[..., T]) -> Callable[..., Any]:
    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> T:
        return await _run(fn, *args, **kwargs)

    call.__doc__ = f"Awaitable ``nw.jobs.{fn.__name__}``.\n\n{fn.__doc__ or ''}"
    return call


enqueue = _twin(facade.enqueue)
enqueue_many = _twin(facade.enqueue_many)
get_job = _twin(facade.get_job)
list_jobs = _twin(facade.list_jobs)
cancel_job = _twin(facade.cancel_job)
estimate = _twin(facade.estimate)
enqueue_pipeline = _twin(pipelines.enqueue_pipeline)
estimate_pipeline = _twin(pipelines.estimate_pipeline)
get_pipeline = _twin(pipelines.get_pipeline)
cancel_pipeline = _twin(pipelines.cancel_pipeline)
retry_pipeline = _twin(pipeline_retry.retry_pipeline)


async def wait(
    project: ProjectLike,
    job_id: str,
    *,
    timeout: float | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> Job:
    """Awaitable ``nw.jobs.wait``: the job once it has ended; ``TimeoutError``
    past ``timeout`` seconds; ``InvalidValue`` for a job the project lacks."""
    async for job in _followed(project, job_id, timeout, config, every=waiting.RECHECK_S):
        if job.is_terminal:
            return job
    raise AssertionError("unreachable: _followed ends only at a terminal job")


async def watch(
    project: ProjectLike,
    job_id: str,
    *,
    timeout: float | None = None,
    config: JobsConfig = DEFAULT_CONFIG,
) -> AsyncIterator[Job]:
    """``nw.jobs.watch`` as an async iterator: the job now, then at each change,
    until (and including) the state it ends in."""
    last: dict[str, Any] | None = None
    async for job in _followed(project, job_id, timeout, config, every=waiting.WATCH_PROGRESS_S):
        seen = waiting.what_changes(job)
        if seen != last or job.is_terminal:
            last = seen
            yield job


async def _followed(
    project: ProjectLike, job_id: str, timeout: float | None, config: JobsConfig, *, every: float
) -> AsyncIterator[Job]:
    """``waiting._followed`` on the loop: the waits are the loop's, the reads the pool's."""
    limit = waiting.check_timeout(timeout)
    deadline = None if limit is None else time.monotonic() + limit
    loop = asyncio.get_running_loop()
    signal = asyncio.Event()

    def wake() -> None:  # on the store's signal thread
        with contextlib.suppress(RuntimeError):  # the loop has closed
            loop.call_soon_threadsafe(signal.set)

    store = await _run(waiting.store_of, project, job_id, config)
    unsubscribe = await _run(store.subscribe, wake)
    try:
        while True:
            signal.clear()
            job = await _run(waiting.current, project, job_id, config)
            yield job
            if job.is_terminal:
                return
            pause = waiting.pause_after(job, limit, deadline, every)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(signal.wait(), pause)
    finally:
        unsubscribe()


__all__ = [
    "cancel_job",
    "enqueue",
    "enqueue_many",
    "estimate",
    "get_job",
    "list_jobs",
    "wait",
    "watch",
]
