"""Answers to repeated reads, kept while the stores they came from have not moved.

A page of ``/api/jobs`` polled by many clients is the same bytes until a job is
written. Each answer is kept with the change mark of the projects it read
(``JobStore.change_mark``, read before the page was): while the mark is the
same, the next request gets the kept bytes without reading, projecting or
encoding a job. A page that shows a live job also moves with the clock alone
(elapsed, ETA), so it is kept for ``live_ttl_s`` at most; a store that cannot
tell its mark is read every time.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, cast

from starlette.responses import Response

from nw.jobs.web.responses import JSONResponse
from nw.jobs.web.streams import Marks
from nw.project import Project

LIVE_STATUSES = ("queued", "running", "cancelling")


class PageCache:
    """At most ``max_bytes`` of answers, the least recently asked dropped first."""

    def __init__(self, marks: Marks, *, live_ttl_s: float, max_bytes: int = 16 << 20):
        self._marks = marks
        self._live_ttl_s = live_ttl_s
        self._max_bytes = max_bytes
        self._bytes = 0
        self._kept: OrderedDict[Hashable, tuple[Any, float, bool, bytes]] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def kept_bytes(self) -> int:
        return self._bytes

    def answer(
        self, key: Hashable, projects: list[Project], build: Callable[[], dict[str, Any]]
    ) -> Response:
        """The JSON of ``build()`` for ``key``, or the kept one while ``projects`` stand still."""
        mark = self._marks.of(projects)
        now = time.monotonic()
        if mark is not None:
            with self._lock:
                kept = self._kept.get(key)
                if kept is not None:
                    kept_mark, at, live, body = kept
                    if kept_mark == mark and (not live or now - at < self._live_ttl_s):
                        self._kept.move_to_end(key)
                        return Response(body, media_type="application/json")
        content = build()
        body = cast(bytes, JSONResponse(content).body)  # render() makes bytes
        if mark is not None and len(body) <= self._max_bytes // 8:
            live = any(job.get("status") in LIVE_STATUSES for job in content.get("jobs", ()))
            with self._lock:
                old = self._kept.pop(key, None)
                if old is not None:
                    self._bytes -= len(old[3])
                self._kept[key] = (mark, now, live, body)
                self._bytes += len(body)
                while self._bytes > self._max_bytes:
                    _, dropped = self._kept.popitem(last=False)
                    self._bytes -= len(dropped[3])
        return Response(body, media_type="application/json")
