"""Server-sent events: one reader per watched value, fanned out to every open stream.

A job's writer is often another process, so a value (the tray's snapshot, one
job) is re-read from the store. Each distinct value has one ``Feed``: a poller
task that exists while someone watches, asks the stores a cheap "has
anything changed?" (``JobStore.change_mark``) every ``poll_interval_s`` and
reads the value only when the answer moved (or once a second while something
runs, for what only the clock moves: elapsed, ETA, a silent worker). A change
is encoded once and handed to every subscriber, so 200 open trays cost what
one does; an idle server does one tiny query per project per poll.

A stream sends the current value at once, then each change; it ends when the
value is final (a finished job), after ``stream_max_s`` (the browser's
``EventSource`` reconnects; long connections through proxies go stale), or
when the server closes (``app.state.closing``). Between changes it sends a
comment every ``KEEPALIVE_S`` so proxies keep it open.

Streams are bounded: at most ``MAX_STREAMS`` open at once and at most
``MAX_FEEDS`` distinct watched values (each a poller thread); a stream past
either is answered 429 with ``Retry-After``, so no number of connections or
of distinct filters (``?actor=`` values, job ids) grows the threads or the
store's reads past a known bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import AsyncGenerator, Callable, Hashable, Iterable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Receive, Scope, Send

from nw.errors import JobStoreError
from nw.jobs.core.model import JobsConfig
from nw.jobs.stores import open_store
from nw.jobs.stores.base import JobStore
from nw.jobs.web.errors import error, loggable
from nw.project import Project

log = logging.getLogger("nw.jobs.web")
Data = dict[str, Any] | None
VOLATILE = ("elapsed_s", "queue_wait_s", "remaining_s", "eta_s", "eta_ts", "worker_silent_s")
"""Fields that change with the clock alone; a stream resends them once a second, not per poll."""
TICK_S = 1.0
KEEPALIVE_S = 15.0
MAX_STREAMS = 128
"""Event streams open at once (all values together); one more is answered 429."""
MAX_FEEDS = 32
"""Distinct values watched at once, each one poller thread; a stream of a new one past it is 429."""
RETRY_AFTER_S = 5


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


def job_running(data: Data) -> bool:
    return not job_ended(data)


def tray_running(data: Data) -> bool:
    return bool(data and data.get("active"))


class Marks:
    """Each served project's change mark, through one read-only handle per project
    kept open (SQLite's ``data_version`` is per connection)."""

    def __init__(self, config: JobsConfig):
        self.config = config
        self._stores: dict[Project, JobStore] = {}
        self._lock = threading.Lock()

    def of(self, projects: Iterable[Project]) -> tuple[Hashable, ...] | None:
        """The projects' marks together; None when a store cannot tell (read anyway)."""
        marks = []
        for project in projects:
            mark = self._mark(project)
            if mark is None:
                return None
            marks.append(mark)
        return tuple(marks)

    def _mark(self, project: Project) -> Hashable | None:
        with self._lock:
            store = self._stores.get(project)
            if store is None:
                store = open_store(project, self.config, create=False)
                if store is None:
                    return ("no store yet",)
                self._stores[project] = store
            try:
                return store.change_mark()
            except Exception:
                # A store that failed (a network blip, a replaced file) is reopened
                # next time; this once, the reader decides (and reports) for itself.
                self._stores.pop(project, None)
                with contextlib.suppress(Exception):
                    store.close()
                return None

    def close(self) -> None:
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            with contextlib.suppress(Exception):
                store.close()


class Feed:
    """One value, read by one poller thread while anyone watches, fanned out to them all.

    The poller is a thread of its own (not one of the request thread pool's, which
    it would hold for its whole life); it hands each change to the subscribers'
    event loop with ``call_soon_threadsafe``.
    """

    def __init__(
        self,
        key: Hashable,
        read: Callable[[], Data],
        mark: Callable[[], Hashable | None],
        ticking: Callable[[Data], bool],
        done: Callable[[Data], bool] | None,
        feeds: Feeds,
    ):
        self.key, self._read, self._mark, self._ticking, self._done = key, read, mark, ticking, done
        self._feeds = feeds
        self._lock = threading.Lock()
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self._thread: threading.Thread | None = None
        self.version = 0
        self.chunk = ""  # the latest value as one SSE message, encoded once for everyone
        self.final: str | None = None  # set once no more values come ("" ends silently)

    def _publish(self, chunk: str, final: str | None = None) -> None:
        with self._lock:
            self.chunk, self.final = chunk, final
            self.version += 1
            waiters = list(self._waiters)
        for loop, event in waiters:
            with contextlib.suppress(RuntimeError):  # a loop that already closed
                loop.call_soon_threadsafe(event.set)

    def _poll(self) -> None:
        closing, every_s = self._feeds.closing, self._feeds.poll_interval_s
        sent_key, sent_at, read_at, mark, value = None, 0.0, 0.0, object(), None
        try:
            while True:
                with self._lock:
                    if not self._waiters:  # nobody watches: the next one starts afresh
                        self._thread = None
                        self._feeds.forget(self)
                        return
                if closing.is_set():
                    break
                now = time.monotonic()
                new_mark = self._mark()
                due = self.version > 0 and self._ticking(value) and now - read_at >= TICK_S
                if new_mark is None or new_mark != mark or due:
                    mark, read_at = new_mark, now
                    value = self._read()
                    key = stable(value)
                    # Unchanged is not resent, unless only the clock moved it (a
                    # running job's elapsed and ETA): once a second at most. A
                    # re-read for a write that changed nothing here (a worker's
                    # beat moves SQLite's mark too) sends nothing.
                    ticked = self._ticking(value) and now - sent_at >= TICK_S
                    if key != sent_key or ticked:
                        sent_key, sent_at = key, now
                        if value is None:
                            self._publish("", sse({"error": "the job is gone"}, event="end"))
                        elif self._done is not None and self._done(value):
                            self._publish(sse(value), sse({"status": value["status"]}, event="end"))
                        else:
                            self._publish(sse(value))
                    if self.final is not None:
                        break
                closing.wait(every_s)
        except JobStoreError as exc:  # the store failed: one line, and browsers reconnect
            log.warning("reading %r for its event stream failed: %s", self.key, loggable(exc))
        except Exception:  # a bug: the streams end and browsers reconnect
            log.exception("reading %r for its event stream failed", self.key)
        self._feeds.forget(self)
        self._publish(self.chunk, self.final if self.final is not None else "")

    async def stream(self, max_s: float) -> AsyncGenerator[str, None]:
        """This subscriber's SSE chunks."""
        event = asyncio.Event()
        me = (asyncio.get_running_loop(), event)
        with self._lock:
            self._waiters.add(me)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._poll, name=f"nw-jobs feed {self.key}", daemon=True
                )
                self._thread.start()
        try:
            yield "retry: 2000\n\n"
            ends_at = time.monotonic() + max_s
            seen = 0
            while True:
                event.clear()
                with self._lock:
                    version, chunk, final = self.version, self.chunk, self.final
                if version != seen:
                    seen = version
                    if chunk:
                        yield chunk
                    if final is not None:
                        if final:
                            yield final
                        return
                left = ends_at - time.monotonic()
                if left <= 0 or self._feeds.closing.is_set():
                    return
                try:
                    await asyncio.wait_for(event.wait(), min(left, KEEPALIVE_S))
                except TimeoutError:
                    yield ": keepalive\n\n"
        finally:
            with self._lock:
                self._waiters.discard(me)


class Feeds:
    """The app's feeds by key (one per watched value, while watched), and the
    count of open streams, both bounded (``max_streams``, ``max_feeds``)."""

    def __init__(
        self,
        poll_interval_s: float,
        closing: threading.Event,
        *,
        max_streams: int = MAX_STREAMS,
        max_feeds: int = MAX_FEEDS,
    ):
        self.poll_interval_s = poll_interval_s
        self.closing = closing
        self.max_streams, self.max_feeds = max_streams, max_feeds
        self._feeds: dict[Hashable, Feed] = {}
        self._open = 0
        self._lock = threading.Lock()

    @property
    def open_streams(self) -> int:
        return self._open

    def subscribe(self, key: Hashable, make: Callable[[], Feed]) -> Feed | str:
        """The feed for ``key`` (made if new) for one more stream, or why not
        (the caps); every feed got here is given back with ``unsubscribe``."""
        with self._lock:
            if self._open >= self.max_streams:
                return (
                    f"{self._open} event streams are open, the most this server keeps"
                    " at once; try again later"
                )
            feed = self._feeds.get(key)
            if feed is None:
                if len(self._feeds) >= self.max_feeds:
                    return (
                        f"{len(self._feeds)} different things are being watched, the most"
                        " this server polls at once; try again later"
                    )
                feed = self._feeds[key] = make()
            self._open += 1
            return feed

    def unsubscribe(self) -> None:
        with self._lock:
            self._open -= 1

    def forget(self, feed: Feed) -> None:
        with self._lock:
            if self._feeds.get(feed.key) is feed:
                del self._feeds[feed.key]


def follow(
    request: Request,
    key: Hashable,
    read: Callable[[], Data],
    projects: list[Project],
    *,
    ticking: Callable[[Data], bool],
    done: Callable[[Data], bool] | None = None,
) -> Response:
    """The stream of ``read()``'s value under ``key``, shared with every other
    request for the same key; re-read when ``projects``' stores change."""
    state = request.app.state
    feeds: Feeds = state.feeds
    marks: Marks = state.marks

    def make() -> Feed:
        return Feed(key, read, lambda: marks.of(projects), ticking, done, feeds)

    return EventStream(feeds, key, make, state.stream_max_s)


class EventStream(Response):
    """A stream's answer: it takes its place under the caps when it starts and
    gives it back when it ends, however it ends (a 429 when there is none)."""

    def __init__(self, feeds: Feeds, key: Hashable, make: Callable[[], Feed], max_s: float) -> None:
        self.feeds, self.key, self.make, self.max_s = feeds, key, make, max_s
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        got = self.feeds.subscribe(self.key, self.make)
        if isinstance(got, str):
            refusal = error(429, got, headers={"retry-after": str(RETRY_AFTER_S)})
            await refusal(scope, receive, send)
            return
        chunks = got.stream(self.max_s)
        try:
            response = StreamingResponse(
                chunks,
                media_type="text/event-stream",
                headers={"cache-control": "no-store", "x-accel-buffering": "no"},
            )
            await response(scope, receive, send)
        finally:
            with contextlib.suppress(RuntimeError):  # still running: it ends by itself
                await chunks.aclose()  # drops its subscription now, not at collection
            self.feeds.unsubscribe()
