"""The console page in headless Chromium: a job's view opened from a row, the
history's pages and filters, retry, the workers panel, and the narrow layout.

Real components: the app served by uvicorn, in-process bodies and a real worker
process, the ``browser`` fixture (``tests/web/conftest.py``).
"""

from __future__ import annotations

import os
import signal
import socket

import pytest

from nw.jobs import cancel_job, enqueue, get_job, list_jobs
from nw.jobs.core.kinds import register_kind, unregister_kind
from nw.jobs.core.model import JobsConfig
from tests.fixtures.bodies import Crawl
from tests.helpers import wait_until
from tests.integration.workers import start_worker, stop

pytestmark = pytest.mark.slow
pytest.importorskip("uvicorn")

# The worker tests' liveness (tests/integration/workers.py starts workers with these).
FAST = JobsConfig(heartbeat_interval_s=0.2, heartbeat_stale_s=1.0, stale_running_s=2.0)


def css(driver, selector):
    return driver.find_elements("css selector", selector)


def one(driver, selector, what=None):
    return wait_until(lambda: css(driver, selector), what=what or selector)[0]


def settled(probe, what):
    """``wait_until`` for a probe that reads nodes the page may redraw meanwhile."""
    from selenium.common.exceptions import StaleElementReferenceException

    def attempt():
        try:
            return probe()
        except StaleElementReferenceException:
            return None

    return wait_until(attempt, what=what)


def ink_then_fail(project, params, *, on_event):
    on_event({"stage_index": 0, "stage_count": 2, "current_transform": "sketch"})
    on_event({"stage_index": 1, "stage_count": 2, "current_transform": "ink"})
    raise RuntimeError("the inker ran out of ink")


def fails(project, params):
    raise RuntimeError("the model timed out")


def done(project, params):
    return {"frames": 24}


def finished(project, job, config=None):
    kw = {"config": config} if config else {}
    return wait_until(
        lambda: (j := get_job(project, job.job_id, **kw)) is not None and j.is_terminal and j,
        what=f"job {job.job_id[:8]} to finish",
    )


def pct(element) -> float:
    value = element.get_attribute("data-pct")
    return float(value) if value else 0.0


def test_a_click_on_a_row_opens_the_job_and_its_view_follows_a_running_job(browser, project):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given a job that failed after two stages, and one that is running
    failed = enqueue(
        project,
        "comic.ink",
        {"title": "Ink page 7", "estimated_usd": 0.25},
        dispatch={"comic.ink": ink_then_fail},
        actor="ana",
    )
    finished(project, failed)
    crawl = Crawl()
    running = enqueue(project, "crawl", {"title": "Slow render"}, dispatch={"crawl": crawl})
    try:
        with serving(create_app([project], poll_interval_s=0.2)) as url:
            browser.get(url + "/")
            # When a person clicks the failed job's row in the recent feed
            settled(
                lambda: (
                    one(browser, f'#recent li[data-job-id="{failed.job_id}"] .note').click() or True
                ),
                "a click on the row",
            )
            # Then its view opens, under its own address
            detail = one(browser, f'#detail[data-job-id="{failed.job_id}"]')
            assert browser.current_url.endswith(f"#job={failed.job_id}")
            assert detail.find_element("css selector", ".head .status").text.lower() == "failed"
            grade = detail.find_element("css selector", ".grade")
            assert grade.get_attribute("data-grade") == "error"
            assert "the inker ran out of ink" in detail.find_element("css selector", ".error").text
            # with the attempt that ran it (this process: its host and pid)
            rows = css(browser, "#detail table.attempts tr[data-ended]")
            assert len(rows) == 1
            assert socket.gethostname() in rows[0].text and str(os.getpid()) in rows[0].text
            assert rows[0].get_attribute("data-ended") == "failed"
            # its progress trail with the stage names, its cost and its params
            trail = settled(
                lambda: "ink" in (t := one(browser, "#detail table.trail").text) and t,
                "the trail to name the stages",
            )
            assert "sketch" in trail
            assert "$0.25" in detail.text
            assert "Ink page 7" in detail.find_element("css selector", "pre.json").text
            assert "ana" in detail.text
            assert not css(browser, "#detail button.cancel")  # a finished job has no Cancel

            # When they go back and click the running job's card
            browser.find_element("css selector", "#back").click()
            one(browser, f'article[data-job-id="{running.job_id}"] a.label').click()
            # Then its view is live: the bar advances, with an ETA, and Cancel is offered
            one(browser, f'#detail[data-job-id="{running.job_id}"][data-status="running"]')
            first = settled(
                lambda: pct(one(browser, "#detail .live .fill")), "the bar to show a pct"
            )
            settled(
                lambda: pct(one(browser, "#detail .live .fill")) > first,
                "the job's view to follow its progress",
            )
            assert one(browser, "#detail .eta-text").text
            assert css(browser, "#detail button.cancel")

            # And a job opens by its address alone
            browser.get(f"{url}/?job={failed.job_id}")
            one(browser, f'#detail[data-job-id="{failed.job_id}"][data-status="failed"]')
    finally:
        crawl.stop.set()
    finished(project, running)


def test_history_pages_back_through_every_job_and_filters(browser, project):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given 60 finished jobs: two kinds, two actors, one in ten failed
    jobs = []
    for i in range(60):
        kind = "a.render" if i % 2 else "b.render"
        body = fails if i % 10 == 0 else done
        jobs.append(
            enqueue(
                project,
                kind,
                {"title": f"Panel {i}"},
                dispatch={kind: body},
                actor="ana" if i < 30 else "ben",
            )
        )
    wait_until(
        lambda: all(j.is_terminal for j in list_jobs(project, limit=100)) and True,
        what="every job to finish",
    )
    with serving(create_app([project], poll_interval_s=0.2)) as url:
        # When a person opens the history
        browser.get(url + "/#history")
        rows = "#history li[data-job-id]"
        settled(lambda: len(css(browser, rows)) == 50, "the first page of 50")
        # and asks for older jobs
        older = browser.find_element("css selector", "#older")
        assert older.is_displayed()
        older.click()
        # Then the next page follows, and the history ends there
        settled(lambda: len(css(browser, rows)) == 60, "the second page")
        shown = settled(lambda: [r.get_attribute("data-job-id") for r in css(browser, rows)], "ids")
        assert sorted(shown) == sorted(j.job_id for j in jobs)
        assert not older.is_displayed()
        assert "whole history" in browser.find_element("css selector", "#history-note").text

        def only(expect, what):
            def probe():
                got = {r.get_attribute("data-job-id") for r in css(browser, rows)}
                return got == expect

            settled(probe, what)

        by_index = dict(enumerate(j.job_id for j in jobs))
        form = browser.find_element("css selector", "#filters")
        # When they pick a status, only failed jobs show
        from selenium.webdriver.support.ui import Select

        Select(form.find_element("css selector", "[name=status]")).select_by_visible_text("failed")
        only({by_index[i] for i in range(0, 60, 10)}, "the failed jobs only")
        assert "status=failed" in browser.current_url
        # a grade too: failed jobs grade error
        Select(form.find_element("css selector", "[name=status]")).select_by_index(0)
        Select(form.find_element("css selector", "[name=grade]")).select_by_visible_text("error")
        only({by_index[i] for i in range(0, 60, 10)}, "the error-graded jobs")
        Select(form.find_element("css selector", "[name=grade]")).select_by_index(0)
        # a text search on the label, with a kind and an actor
        search = form.find_element("css selector", "[name=q]")
        search.send_keys("panel 1")
        form.find_element("css selector", "[name=kind]").send_keys("a.render")
        form.find_element("css selector", "[name=actor]").send_keys("ana")
        form.find_element("css selector", "button[type=submit]").click()
        only({by_index[i] for i in (1, 11, 13, 15, 17, 19)}, "odd panels 1x of ana")


def test_retry_from_a_failed_job_s_view_runs_it_again_on_a_worker(browser, project, tmp_path):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given a failed job of a kind a worker process can run (registered here too:
    # a retry goes to the workers, so the app must know the kind is theirs)
    register_kind("t.noop", "tests.fixtures.bodies:noop")
    failed = enqueue(
        project, "t.noop", {"title": "Redo me"}, dispatch={"t.noop": fails}, config=FAST
    )
    finished(project, failed, FAST)
    worker = start_worker(project)
    try:
        with serving(create_app([project], config=FAST, poll_interval_s=0.2)) as url:
            browser.get(f"{url}/#job={failed.job_id}")
            one(browser, f'#detail[data-job-id="{failed.job_id}"][data-status="failed"]')
            # When a person clicks Retry
            one(browser, "#detail button.retry").click()
            # Then the same job runs again, on the worker, and ends succeeded
            one(browser, f'#detail[data-job-id="{failed.job_id}"][data-status="succeeded"]')
            again = get_job(project, failed.job_id, config=FAST)
            assert again.status == "succeeded"
            ended = [
                r.get_attribute("data-ended")
                for r in css(browser, "#detail table.attempts tr[data-ended]")
            ]
            assert ended[-1] == "succeeded"
            assert str(worker.pid) in css(browser, "#detail table.attempts tr[data-ended]")[-1].text
            assert not css(browser, "#detail button.retry")  # succeeded: nothing to retry
    finally:
        stop(worker)
        unregister_kind("t.noop")


def test_the_workers_panel_shows_a_live_worker_s_jobs_and_then_its_loss(browser, project):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given a worker process running a long job
    worker = start_worker(project, max_concurrent=2)
    register_kind("t.sleepy", "tests.fixtures.bodies:sleepy")
    try:
        job = enqueue(project, "t.sleepy", {"seconds": 60, "title": "Long nap"}, config=FAST)
    finally:
        unregister_kind("t.sleepy")
    try:
        wait_until(
            lambda: get_job(project, job.job_id, config=FAST).status == "running",
            timeout=20,
            what="the worker to run the job",
        )
        with serving(create_app([project], config=FAST, poll_interval_s=0.2)) as url:
            # When a person opens the workers panel
            browser.get(url + "/#workers")
            card = one(browser, '.worker[data-state="live"]', "a live worker")
            # Then it shows the worker: host, pid, kinds, slots busy of total, its job
            text = card.text
            assert socket.gethostname() in text and f"pid {worker.pid}" in text
            assert "1 of 2 slots busy" in text
            assert "t.sleepy" in text
            # and its job opens from there
            card.find_element("css selector", f'.jobs a[href="#job={job.job_id}"]').click()
            one(browser, f'#detail[data-job-id="{job.job_id}"][data-status="running"]')
            # When the worker dies, the panel says it is lost
            browser.get(url + "/#workers")
            one(browser, '.worker[data-state="live"]')
            os.kill(worker.pid, signal.SIGKILL)
            worker.wait(10)
            lost = wait_until(
                lambda: css(browser, '.worker[data-state="lost"]'),
                timeout=20,
                what="the worker to show as lost",
            )[0]
            assert f"pid {worker.pid}" in lost.text
    finally:
        stop(worker)
        cancel_job(project, job.job_id, config=FAST)


def test_at_420_px_nothing_scrolls_sideways_and_a_paid_job_s_cancel_asks_first(browser, project):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given finished jobs and two running ones, one paid, with long labels
    for i in range(3):
        finished(
            project,
            enqueue(
                project,
                "panel.render",
                {"title": f"Panel {i}: the lighthouse keeper climbs the spiral stairs at dawn"},
                dispatch={"panel.render": done},
            ),
        )
    crawls = [Crawl(), Crawl()]
    paid = enqueue(
        project,
        "music.score.orchestral",
        {"title": "Score: end credits for the whole film, strings", "estimated_usd": 0.5},
        dispatch={"music.score.orchestral": crawls[0]},
    )
    free = enqueue(
        project,
        "panel.upscale.x4",
        {"title": "Upscale panel 2 to 4K with the long model name"},
        dispatch={"panel.upscale.x4": crawls[1]},
    )
    try:
        with serving(create_app([project], poll_interval_s=0.2)) as url:
            browser.set_window_size(420, 900)
            browser.get(url + "/")
            wait_until(lambda: len(css(browser, "article.job")) == 2, what="two active cards")
            wait_until(lambda: len(css(browser, "#recent li")) == 3, what="three recent rows")
            width = browser.execute_script("return document.documentElement.clientWidth")
            # Then the page does not scroll sideways
            scroll = browser.execute_script("return document.documentElement.scrollWidth")
            assert scroll <= width
            # every card's status, cost and Cancel are inside the window
            for card in css(browser, "article.job"):
                for part in (".status", ".cost", "button.cancel"):
                    box = card.find_element("css selector", part).rect
                    assert box["x"] >= 0 and box["x"] + box["width"] <= width, part
            # and recent labels show their words, not "P…"
            for label in css(browser, "#recent .label"):
                assert label.text.startswith("Panel ")
                assert browser.execute_script(
                    "return arguments[0].scrollWidth <= arguments[0].clientWidth", label
                )
            # The job's view does not scroll sideways either
            browser.get(f"{url}/#job={paid.job_id}")
            one(browser, f'#detail[data-job-id="{paid.job_id}"]')
            scroll = browser.execute_script("return document.documentElement.scrollWidth")
            assert scroll <= width
            browser.get(url + "/")
            card = one(browser, f'article[data-job-id="{paid.job_id}"]')

            # When a person clicks Cancel on the paid job and says no
            card.find_element("css selector", "button.cancel").click()
            alert = wait_until(lambda: _alert(browser), what="the question")
            assert "$0.50" in alert.text
            alert.dismiss()
            # Then nothing is sent: the button is as it was and the job runs on
            button = card.find_element("css selector", "button.cancel")
            assert button.is_enabled() and button.text == "Cancel"
            assert get_job(project, paid.job_id).status == "running"
            # When they confirm, it is cancelled
            card.find_element("css selector", "button.cancel").click()
            wait_until(lambda: _alert(browser), what="the question").accept()
            wait_until(
                lambda: get_job(project, paid.job_id).status in ("cancelling", "cancelled"),
                what="the paid job to be cancelled",
            )
            # A free job's Cancel does not ask
            free_card = one(browser, f'article[data-job-id="{free.job_id}"]')
            free_card.find_element("css selector", "button.cancel").click()
            wait_until(
                lambda: get_job(project, free.job_id).status in ("cancelling", "cancelled"),
                what="the free job to be cancelled without a question",
            )
            assert _alert(browser) is None
    finally:
        for c in crawls:
            c.stop.set()


def _alert(browser):
    from selenium.common.exceptions import NoAlertPresentException

    try:
        alert = browser.switch_to.alert
        alert.text  # noqa: B018  (raises when there is none)
        return alert
    except NoAlertPresentException:
        return None


def test_the_page_works_mounted_under_a_prefix(browser, project):
    from starlette.applications import Starlette
    from starlette.routing import Mount

    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given the app mounted at /jobs inside another app, with a finished job
    job = finished(
        project,
        enqueue(project, "panel.render", {"title": "Mounted"}, dispatch={"panel.render": done}),
    )
    inner = create_app([project], poll_interval_s=0.2)
    outer = Starlette(routes=[Mount("/ops/jobs", app=inner)])
    outer.state.closing = inner.state.closing  # so the test server ends the streams
    with serving(outer) as url:
        # When a person opens the tray there and clicks the job's row
        browser.get(url + "/ops/jobs/")
        settled(
            lambda: one(browser, f'#recent li[data-job-id="{job.job_id}"] .note').click() or True,
            "a click on the row",
        )
        # Then the job's view loads from the prefixed API, at a prefixed address
        one(browser, f'#detail[data-job-id="{job.job_id}"][data-status="succeeded"]')
        assert browser.current_url == f"{url}/ops/jobs/#job={job.job_id}"
        # and so do the history and the workers panel
        browser.get(url + "/ops/jobs/#history")
        one(browser, f'#history li[data-job-id="{job.job_id}"]')
        browser.get(url + "/ops/jobs/#workers")
        one(browser, '.worker[data-state="live"]', "this process, which ran the job, as a worker")


def test_a_retry_the_cost_gate_holds_asks_for_approval_first(browser, project):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given a project under a budget, and a failed job with no price: under a
    # cap, the gate runs an unpriced job only when someone approves it
    budget = JobsConfig(budget_usd=10.0)
    register_kind("t.noop", "tests.fixtures.bodies:noop")
    costly = enqueue(
        project,
        "t.noop",
        {"title": "Unpriced render"},
        dispatch={"t.noop": fails},
        approved=True,
        config=budget,
    )
    finished(project, costly, budget)
    try:
        with serving(create_app([project], config=budget, poll_interval_s=0.2)) as url:
            browser.get(f"{url}/#job={costly.job_id}")
            one(browser, f'#detail[data-job-id="{costly.job_id}"][data-status="failed"]')
            # When a person clicks Retry, the gate's question is theirs to answer
            one(browser, "#detail button.retry").click()
            wait_until(lambda: _alert(browser), what="the approval question").dismiss()
            # Saying no leaves the job failed, and says so
            settled(
                lambda: "Not retried" in one(browser, "#detail-message").text,
                "the page to say it was not retried",
            )
            assert get_job(project, costly.job_id, config=budget).status == "failed"
            # Saying yes queues it again, approved
            one(browser, "#detail button.retry").click()
            wait_until(lambda: _alert(browser), what="the approval question").accept()
            wait_until(
                lambda: get_job(project, costly.job_id, config=budget).status == "queued",
                what="the job to be queued again",
            )
            one(browser, f'#detail[data-job-id="{costly.job_id}"][data-status="queued"]')
    finally:
        unregister_kind("t.noop")
        cancel_job(project, costly.job_id, config=budget)
