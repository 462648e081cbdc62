"""Server-sent events: a value re-read on a poll, sent when it changes.

The streams poll the store (a job's writer is often another process), send
a value when it changes (or once a second, for what only the clock moves),
and end when the value is final, after ``stream_max_s`` (the browser's
``EventSource`` reconnects; long connections through proxies go stale), or
when the server closes (``app.state.closing``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import StreamingResponse

Data = dict[str, Any] | None
VOLATILE = ("elapsed_s", "queue_wait_s", "remaining_s", "eta_s", "eta_ts", "worker_silent_s")
"""Fields that change with the clock alone; a stream resends them once a second, not per poll."""


def stable(value: Any) -> str:
    """A change key that ignores what only the clock moves."""
    if isinstance(value, dict):
        value = {k: _stable_inner(v) for k, v in value.items() if k not in VOLATILE and k != "now"}
    return json.dumps(value, sort_keys=True, default=str)


def _stable_inner(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _stable_inner(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_stable_inner(v) for v in value]
    return value


def sse(data: Any, *, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, default=str)}\n\n"


def job_ended(data: Data) -> bool:
    return data is None or data.get("status") in ("succeeded", "failed", "cancelled")


async def changes(
    first: Data,
    read: Callable[[], Data],
    every_s: float,
    max_s: float,
    done: Callable[[Data], bool] | None,
    closing: threading.Event,
) -> AsyncIterator[str]:
    """SSE chunks: ``first``, then each change (or a clock tick a second), until ``done``,
    ``max_s`` or ``closing``."""
    yield "retry: 2000\n\n"
    data = first
    sent_key, sent_at = None, 0.0
    ends_at = time.monotonic() + max_s
    while True:
        if data is None:
            yield sse({"error": "the job is gone"}, event="end")
            return
        key, now = stable(data), time.monotonic()
        if key != sent_key or now - sent_at >= 1.0:
            sent_key, sent_at = key, now
            yield sse(data)
        if done is not None and done(data):
            yield sse({"status": data.get("status")}, event="end")
            return
        if now >= ends_at or closing.is_set():
            return
        await anyio.sleep(every_s)
        data = await run_in_threadpool(read)


def follow(
    request: Request, first: Data, read: Callable[[], Data], done: Callable[[Data], bool] | None
) -> StreamingResponse:
    """The response that streams ``first`` and then ``read()``'s changes, paced by
    the app's ``poll_interval_s`` and ``stream_max_s`` and ended by its ``closing``."""
    settings = request.app.state
    chunks = changes(
        first, read, settings.poll_interval_s, settings.stream_max_s, done, settings.closing
    )
    return StreamingResponse(
        chunks,
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )
