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
from typing import Any

from starlette.responses import JSONResponse, Response

from nw.jobs.web.streams import Marks
from nw.project import Project

LIVE_STATUSES = ("queued", "running", "cancelling")


class PageCache:
    def __init__(self, marks: Marks, *, live_ttl_s: float, max_entries: int = 256):
        self._marks = marks
        self._live_ttl_s = live_ttl_s
        self._max = max_entries
        self._kept: OrderedDict[Hashable, tuple[Any, float, bool, bytes]] = OrderedDict()
        self._lock = threading.Lock()

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
        body = JSONResponse(content).body
        if mark is not None:
            live = any(job.get("status") in LIVE_STATUSES for job in content.get("jobs", ()))
            with self._lock:
                self._kept[key] = (mark, now, live, body)
                self._kept.move_to_end(key)
                while len(self._kept) > self._max:
                    self._kept.popitem(last=False)
        return Response(body, media_type="application/json")
