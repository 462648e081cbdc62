"""Many watchers, one reader: change marks, shared event-stream feeds, the page cache."""

from __future__ import annotations

import socket
import threading
import warnings

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from nw.jobs import cancel_job, enqueue, get_job
from nw.jobs.api import facade
from nw.jobs.core.model import DEFAULT_CONFIG
from nw.jobs.execution.runtimes import shutdown_runtimes
from nw.jobs.stores import open_store
from nw.jobs.web import create_app, routes_summary
from nw.jobs.web.page_cache import PageCache
from nw.jobs.web.streams import Marks
from tests.helpers import wait_until
from tests.web.server import serving


def quick(project, params):
    return {"ok": True}


def _finish(project, cfg, n=1):
    job = enqueue(project, "quick", {"n": n}, dispatch={"quick": quick}, config=cfg)
    wait_until(
        lambda: (j := get_job(project, job.job_id, config=cfg)) is not None and j.is_terminal,
        what="the job to finish",
    )
    return job


def test_a_change_mark_moves_on_each_write_and_stands_still_otherwise(project, cfg):
    # Given a project with a job, and a reader's handle on its store
    _finish(project, cfg, 1)
    reader = open_store(project, cfg, create=False)
    try:
        first = reader.change_mark()
        assert first is not None
        # When nothing is written, the mark stands still
        assert reader.change_mark() == first
        # When a job is written (queued, run, finished), it moves
        job = _finish(project, cfg, 2)
        second = reader.change_mark()
        assert second != first
        assert reader.change_mark() == second
        # A cancel of a finished job writes nothing, so the mark stays
        cancel_job(project, job.job_id, config=cfg)
        assert reader.change_mark() == second
    finally:
        reader.close()


class Stream:
    """One raw event-stream connection, read on a thread; keeps every byte."""

    def __init__(self, base: str, path: str):
        host, port = base.removeprefix("http://").split(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        self.data = b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            while chunk := self.sock.recv(65536):
                self.data += chunk
        except OSError:
            pass

    def close(self):
        self.sock.close()


def test_many_open_trays_share_one_reader_that_reads_only_on_change(project, monkeypatch):
    # Given a project with a finished job, served with a fast poll, and nothing
    # else writing to it (this process's runtime, which beats, is stopped)
    first = _finish(project, DEFAULT_CONFIG, 1)
    shutdown_runtimes()
    reads = []
    real = routes_summary.snapshot

    def counted(request, actor):
        reads.append(1)
        return real(request, actor)

    monkeypatch.setattr(routes_summary, "snapshot", counted)
    app = create_app([project], poll_interval_s=0.05, stream_max_s=60)
    with serving(app) as url:
        # When twenty trays open the summary stream
        trays = [Stream(url, "/api/summary/events") for _ in range(20)]
        try:
            wait_until(
                lambda: all(first.job_id.encode() in t.data for t in trays),
                what="every tray to get the first snapshot",
            )
            # Then, with nothing written, nobody reads the jobs again
            settled = len(reads)
            assert settled < len(trays)  # not one read per tray
            idle = threading.Event()
            idle.wait(0.5)  # twenty polls' worth of time, nothing written
            assert len(reads) == settled
            # When a job is written, every tray gets it, from a handful of reads
            job = _finish(project, DEFAULT_CONFIG, 2)
            wait_until(
                lambda: all(job.job_id.encode() in t.data for t in trays),
                what="every tray to see the new job",
            )
            assert len(reads) - settled < len(trays)
        finally:
            for t in trays:
                t.close()


def test_a_polled_page_is_read_once_until_a_job_is_written(project, monkeypatch):
    # Given a project with a job, and a count of the list reads
    first = _finish(project, DEFAULT_CONFIG, 1)
    calls = []
    real = facade.list_jobs

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(facade, "list_jobs", counted)
    client = TestClient(create_app([project], poll_interval_s=0.05))
    # When the same page is asked for again and again
    pages = [client.get("/api/jobs?limit=50").json() for _ in range(5)]
    # Then it was read once, and every answer is the same
    assert len(calls) == 1
    assert all(p == pages[0] for p in pages)
    assert [j["job_id"] for j in pages[0]["jobs"]] == [first.job_id]
    # Another query is another page
    client.get("/api/jobs?limit=1")
    assert len(calls) == 2
    # When a job is written, the next answer has it
    job = _finish(project, DEFAULT_CONFIG, 2)
    ids = [j["job_id"] for j in client.get("/api/jobs?limit=50").json()["jobs"]]
    assert ids == [job.job_id, first.job_id]
    assert len(calls) == 3


def test_the_page_cache_keeps_no_more_than_its_byte_budget(project):
    # Given a cache of 8 kB, and pages of about 1 kB under ever new queries
    _finish(project, DEFAULT_CONFIG, 1)
    cache = PageCache(Marks(DEFAULT_CONFIG), live_ttl_s=1.0, max_bytes=8000)
    builds = []

    def build():
        builds.append(1)
        return {"jobs": [], "pad": "x" * 900}

    for i in range(50):
        cache.answer(("page", i), [project], build)
    # Then it holds at most 8 kB: the oldest answers were dropped
    assert 0 < cache.kept_bytes <= 8000
    cache.answer(("page", 0), [project], build)
    assert len(builds) == 51  # the first page was dropped, so it is read again
    cache.answer(("page", 49), [project], build)
    assert len(builds) == 51  # the newest is still kept
