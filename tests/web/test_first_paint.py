"""The tray before its first data: it says nothing it does not know yet.

A page that has not had its first snapshot used to say "Nothing is running"
and "No finished jobs yet" beside a green "live" dot, on a project with
finished jobs. Here the snapshot stream is held back by the server until the
test lets it go, so "before the first data" is a state the test controls, not
a race it hopes to catch.
"""

from __future__ import annotations

import threading

import pytest

from nw.jobs import enqueue, get_job
from tests.helpers import wait_until

pytestmark = pytest.mark.slow
pytest.importorskip("uvicorn")


def done(project, params):
    return {"ok": True}


class HoldStream:
    """ASGI middleware: the snapshot stream waits until ``release`` is set."""

    def __init__(self, app):
        self.app, self.release = app, threading.Event()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].endswith("/api/summary/events"):
            import anyio

            await anyio.to_thread.run_sync(self.release.wait)
        await self.app(scope, receive, send)


def shown(browser, selector) -> bool:
    return any(e.is_displayed() for e in browser.find_elements("css selector", selector))


def test_the_tray_says_nothing_is_running_only_once_it_knows(browser, project):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given a project with a finished job
    job = enqueue(project, "done", {"title": "Finished"}, dispatch={"done": done})
    wait_until(lambda: get_job(project, job.job_id).is_terminal, what="the job to finish")
    app = create_app([project], poll_interval_s=0.2)
    held = HoldStream(app)
    with serving(held) as url:
        try:
            # When the page has loaded but its first snapshot has not arrived
            browser.get(url + "/")
            wait_until(
                lambda: browser.execute_script("return document.readyState") == "complete",
                what="the page loaded",
            )
            # Then it claims neither an empty tray nor an empty feed, and is not "live"
            assert not shown(browser, "#active-empty")
            assert not shown(browser, "#recent-empty")
            conn = browser.find_element("css selector", "#conn")
            assert conn.get_attribute("data-state") != "live"
        finally:
            held.release.set()
        # When the snapshot arrives, the page shows what it says
        row = f'#recent li[data-job-id="{job.job_id}"]'
        wait_until(lambda: browser.find_elements("css selector", row), what="the finished job")
        assert not shown(browser, "#recent-empty")
        assert shown(browser, "#active-empty")  # nothing is running: now it knows
        assert conn.get_attribute("data-state") == "live"


def test_the_tray_s_counts_follow_jobs_that_start_without_anything_finishing(browser, project):
    import time

    from nw.jobs.web import create_app
    from tests.fixtures.bodies import Crawl
    from tests.web.server import serving

    # Given two jobs due in a few seconds (queued), and nothing finishing meanwhile
    crawl = Crawl()
    due = time.time() + 3
    queued = [
        enqueue(project, "crawl", {"i": i}, dispatch={"crawl": crawl}, not_before=due)
        for i in range(2)
    ]
    try:
        with serving(create_app([project], poll_interval_s=0.2)) as url:
            browser.get(url + "/")
            tally = '#totals a.tally[data-status="{}"]'

            def count(status):
                found = browser.find_elements("css selector", tally.format(status))
                return found[0].text if found else None

            wait_until(lambda: count("queued") == "2 queued", what="2 queued in the counts")
            # When they start (the feed of finished jobs does not move)
            wait_until(
                lambda: all(get_job(project, j.job_id).status == "running" for j in queued),
                what="both jobs running",
            )
            # Then the counts say so too, without a reload
            wait_until(
                lambda: count("running") == "2 running" and count("queued") is None,
                timeout=20,
                what="the counts to follow the jobs that started",
            )
    finally:
        crawl.stop.set()


def fails(project, params):
    raise RuntimeError("the model timed out after a very long wait at the provider's queue")


def test_at_420_px_a_job_s_attempts_show_how_and_why_they_ended_without_scrolling(browser, project):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given a failed job, whose one attempt says how and why it ended
    job = enqueue(project, "fails", {"title": "Narrow"}, dispatch={"fails": fails})
    wait_until(lambda: get_job(project, job.job_id).is_terminal, what="the job to fail")
    with serving(create_app([project], poll_interval_s=0.2)) as url:
        browser.set_window_size(420, 900)
        browser.get(f"{url}/#job={job.job_id}")
        cells = wait_until(
            lambda: browser.find_elements("css selector", "#detail table.attempts td"),
            what="the attempts' cells",
        )
        width = browser.execute_script("return document.documentElement.clientWidth")
        # Then every cell, "ended" and "why" among them, is inside the window
        for cell in cells:
            box = cell.rect
            assert box["x"] >= 0 and box["x"] + box["width"] <= width, cell.text
        ended, why = cells[4], cells[5]  # the columns: #, host, pid, started, ended, why
        assert ended.is_displayed() and "timed out" in why.text
        # and nothing in the job's view scrolls sideways, the attempts' box included
        box = browser.find_element("css selector", "#detail table.attempts").find_element(
            "xpath", ".."
        )
        assert browser.execute_script(
            "return arguments[0].scrollWidth <= arguments[0].clientWidth", box
        )
