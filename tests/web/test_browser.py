"""The tray in headless Chromium: a running job's bar advances, Cancel ends it cancelled.

The ``browser`` fixture (``tests/web/conftest.py``) drives Debian's Chromium
through Selenium.
"""

from __future__ import annotations

import time

import pytest

from nw.jobs import enqueue, get_job
from tests.fixtures.bodies import Crawl
from tests.helpers import wait_until

pytestmark = pytest.mark.slow
TOKEN = "browser-test-token"


def _pct(driver, job_id: str) -> float | None:
    found = driver.find_elements("css selector", f'article[data-job-id="{job_id}"] .fill')
    if not found:
        return None
    value = found[0].get_attribute("data-pct")
    return float(value) if value else None


def test_tray_shows_a_job_advance_and_cancels_it(browser, project):
    pytest.importorskip("uvicorn")
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given a running job that reports its progress, and the tray served with a token
    crawl = Crawl()
    job = enqueue(project, "crawl", {"title": "Slow render"}, dispatch={"crawl": crawl})
    app = create_app([project], token=TOKEN, poll_interval_s=0.2)
    try:
        with serving(app) as url:
            # When a person opens the tray (the token link trades itself for a cookie)
            browser.get(f"{url}/?token={TOKEN}")
            assert "token" not in browser.current_url
            # Then the job's card shows a bar that advances
            first = wait_until(lambda: _pct(browser, job.job_id), what="the bar to show a pct")
            wait_until(
                lambda: (_pct(browser, job.job_id) or 0) > first,
                what=f"the bar to advance past {first}",
            )
            card = browser.find_element("css selector", f'article[data-job-id="{job.job_id}"]')
            assert "Slow render" in card.text
            # When they click Cancel
            card.find_element("css selector", "button.cancel").click()
            # Then the job ends cancelled: it leaves the active list for the recent feed
            row = f'#recent li[data-job-id="{job.job_id}"][data-status="cancelled"]'
            wait_until(
                lambda: browser.find_elements("css selector", row),
                what="the job to show as cancelled in the recent feed",
            )
            assert not browser.find_elements("css selector", f'article[data-job-id="{job.job_id}"]')
            feed = browser.find_element("css selector", row)
            assert feed.get_attribute("data-grade") == "notice"
    finally:
        crawl.stop.set()
    final = wait_until(
        lambda: (j := get_job(project, job.job_id)) is not None and j.is_terminal and j,
        what="the job to finish",
    )
    assert final.status == "cancelled"


def test_the_page_formats_costs_and_etas_like_the_terminal(browser, project):
    pytest.importorskip("uvicorn")
    from nw.cli.render import cost_text, eta_text, state_text
    from nw.jobs.web import create_app
    from tests.cli.test_render import COST_CASES
    from tests.web.server import serving

    etas = [
        {"status": "running", "confidence": "prior", "eta_s": 10},
        {"status": "running", "confidence": "learned", "eta_s": 3.2},
        {"status": "queued", "confidence": "exact", "eta_s": 0.5},
        {"status": "running", "confidence": None, "eta_s": None},
    ]
    with serving(create_app([project])) as url:
        browser.get(url + "/")
        wait_until(lambda: browser.execute_script("return typeof costOf === 'function'"))
        for cost, cached, shown in COST_CASES:
            job = {"cost": cost, "cached": cached}
            assert browser.execute_script("return costOf(arguments[0]).text", job) == shown
            assert cost_text(job) == shown
        for job in etas:
            text = browser.execute_script("return etaOf(arguments[0])", job)
            page = text[0] + (f" ({text[1]})" if text[1] else "")
            assert page == eta_text(job)
        # A live job whose worker the server's predicate says is dead reads "worker lost"
        states = [
            ({"status": "running", "worker_responsive": False}, "worker lost"),
            ({"status": "cancelling", "worker_responsive": False}, "worker lost"),
            ({"status": "running", "worker_responsive": True}, "running"),
            ({"status": "running", "worker_responsive": None}, "running"),
            ({"status": "failed", "worker_responsive": None}, "failed"),
            # and a queued job held by its key or a delay says what holds it
            (
                {"status": "queued", "waiting": "waiting: fal:kling at 2 of 2"},
                "waiting: fal:kling at 2 of 2",
            ),
            ({"status": "queued", "waiting": "starts in 40s"}, "starts in 40s"),
            ({"status": "queued", "waiting": None}, "queued"),
        ]
        for job, shown in states:
            assert browser.execute_script("return stateOf(arguments[0])", job) == shown
            assert state_text(job) == shown


def test_tray_says_what_holds_a_queued_job(browser, project):
    pytest.importorskip("uvicorn")
    from nw.jobs import register_kind, set_limit
    from nw.jobs.core.kinds import unregister_kind
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given a key capped at 1, one of its jobs running and one queued behind it,
    # and a job delayed by a minute
    register_kind("t.capped", "tests.fixtures.bodies:noop", limit_key="fal:kling")
    try:
        set_limit(project, "fal:kling", max_running=1)
        running = enqueue(project, "t.capped", {"i": 1})
        behind = enqueue(project, "t.capped", {"i": 2})
        later = enqueue(project, "t.capped", {"i": 3, "key": "x"}, not_before=time.time() + 60)
        from nw.jobs import DEFAULT_CONFIG
        from nw.jobs.stores import shared_store

        store = shared_store(project, DEFAULT_CONFIG, create=True)
        got = store.claim(["t.capped"], now=time.time(), runner_id="elsewhere", limit=3)
        assert [r.record["job_id"] for r in got] == [running.job_id]
        app = create_app([project], token=TOKEN, poll_interval_s=0.2)
        with serving(app) as url:
            # When a person opens the tray
            browser.get(f"{url}/?token={TOKEN}")

            def status_of(job_id):
                sel = f'article[data-job-id="{job_id}"] .status'
                found = browser.find_elements("css selector", sel)
                return found[0].get_attribute("textContent") if found else None  # not upper-cased

            # Then the queued jobs say what holds them instead of "queued"
            wait_until(
                lambda: status_of(behind.job_id) == "waiting: fal:kling at 1 of 1",
                what="the capped job's status",
            )
            assert status_of(later.job_id) in ("starts in 1m", "starts in 59s", "starts in 60s")
            assert status_of(running.job_id) == "running"
    finally:
        unregister_kind("t.capped")
