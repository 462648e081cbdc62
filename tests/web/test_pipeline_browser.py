"""A pipeline's view in headless Chromium: reached from one of its jobs, it
shows the steps in order with their states, the whole quote and the ETA, and
follows the pipeline to its end as a real worker runs it.

Real components: the app served by uvicorn, a worker process, the project's
file, the ``browser`` fixture (``tests/web/conftest.py``)."""

from __future__ import annotations

import pytest

from nw import jobs
from tests.fixtures import pipeline_bodies
from tests.helpers import wait_until
from tests.integration.workers import start_worker, stop

pytestmark = pytest.mark.slow
pytest.importorskip("uvicorn")


SHOWN = """
const root = document.getElementById("pipeline");
const text = (sel) => (root.querySelector(sel) || {}).textContent || "";
return {
  title: text("h2.title"), quote: text("dd.quote"), eta: text("dd.eta"), pct: text("dd.pct"),
  steps: [...root.querySelectorAll(".step")].map((li) => ({
    name: li.querySelector(".name").textContent, status: li.dataset.status, text: li.textContent,
  })),
};
"""


def shown(browser):
    """What the pipeline's view shows, read in one go (it is redrawn as the pipeline moves)."""
    got = browser.execute_script(SHOWN)
    return got if got["steps"] else None


def follow_link(browser, pipeline_id) -> bool:
    """Click the job view's pipeline link (the view may be redrawn meanwhile: try again)."""
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        links = browser.find_elements("css selector", "#detail a.pipeline-link")
        if not links:
            return False
        assert links[0].text == f"step panels of {pipeline_id}"
        links[0].click()
        return True
    except StaleElementReferenceException:
        return False


def test_a_pipeline_is_shown_from_its_job_and_followed_to_its_end(browser, project, tmp_path):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    pipeline_bodies.register_all()
    gate = tmp_path / "open"
    steps = {
        "storyboard": {
            "kind": "p.gate",
            "params": {"name": "storyboard", "open": str(gate), "estimated_usd": 0.1},
        },
        "panels": {
            "kind": "p.step",
            "params": {"name": "panels", "estimated_usd": 0.4},
            "after": ["storyboard"],
        },
        "animation": {
            "kind": "p.step",
            "params": {"name": "<b>animation</b>"},
            "after": ["panels"],
        },
    }
    p = jobs.enqueue_pipeline(project, steps, label="Film <i>one</i>")
    worker = start_worker(project, extra=("--import", "tests.fixtures.pipeline_bodies"))
    try:
        with serving(create_app([project], poll_interval_s=0.2)) as url:
            # Given the view of one of its jobs, a person follows its pipeline link
            browser.get(f"{url}/#job={p.step('panels').job.job_id}")
            wait_until(lambda: follow_link(browser, p.pipeline_id), what="the pipeline link")
            view = f'#pipeline[data-pipeline-id="{p.pipeline_id}"]'
            wait_until(lambda: browser.find_elements("css selector", view), what="its view")
            # Then every step shows in order, the waiting ones saying on what
            seen = wait_until(lambda: shown(browser), what="the steps")
            assert [s["name"] for s in seen["steps"]] == ["storyboard", "panels", "animation"]
            assert "waiting: after storyboard" in seen["steps"][1]["text"].lower()
            assert seen["title"] == "Film <i>one</i>"  # markup shown as text
            assert seen["quote"] == "≥ $0.50"  # the whole quote, a lower bound (one unpriced)
            assert seen["eta"]
            # When the first step is let through, the page follows it to the end
            gate.touch()
            wait_until(
                lambda: browser.find_elements("css selector", f'{view}[data-status="succeeded"]'),
                timeout=30,
                what="the pipeline to end on the page",
            )
            seen = shown(browser)
            assert [s["status"] for s in seen["steps"]] == ["succeeded"] * 3
            assert seen["eta"] == "ended" and seen["pct"].startswith("100%")
    finally:
        stop(worker)
