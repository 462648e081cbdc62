"""Parked jobs in the console (headless Chromium): a card says what the job waits
on ("waiting on fake, 3rd in queue"), and its view shows the provider and the
request. ``NW_SCREENSHOT`` set to a path saves the tray as it is then (the
README's picture, ``misc/screenshots/parked.png``)."""

from __future__ import annotations

import os

import pytest

from nw import jobs
from tests.fixtures import parked_kinds
from tests.helpers import wait_until

pytestmark = pytest.mark.slow


def test_the_tray_shows_what_parked_jobs_wait_on(browser, project, tmp_path):
    pytest.importorskip("uvicorn")
    from nw.jobs.web import create_app
    from tests.web.server import serving

    parked_kinds.register()
    folder = tmp_path / "provider"
    folder.mkdir()
    dispatch = {"p.render": parked_kinds.render}
    made = [
        jobs.enqueue(
            project,
            "p.render",
            {"dir": str(folder), "takes_s": 600, "position": n, "title": title, "quiet": True},
            dispatch=dispatch,
        )
        for n, title in ((3, "Shot 12: the heron lands"), (1, "Shot 11: reeds"), (0, "Shot 10"))
    ]
    wait_until(
        lambda: all(jobs.get_job(project, j.job_id).parked for j in made),
        timeout=20,
        what="three parked",
    )
    app = create_app([project], poll_interval_s=0.2)
    with serving(app) as url:
        browser.get(url)
        card = f'article[data-job-id="{made[0].job_id}"]'
        found = wait_until(
            lambda: [c for c in browser.find_elements("css selector", card) if c.text],
            what="the parked job's card",
        )
        assert "waiting on fake, 3rd in queue" in found[0].text.lower()  # shown in capitals
        others = [browser.find_element("css selector", f'article[data-job-id="{j.job_id}"]')
                  for j in made[1:]]  # fmt: skip
        assert "waiting on fake, 1st in queue" in others[0].text.lower()
        assert "waiting on fake, running there" in others[1].text.lower()
        if os.environ.get("NW_SCREENSHOT"):
            browser.save_screenshot(os.environ["NW_SCREENSHOT"])
        browser.get(f"{url}/#job={made[0].job_id}")
        view = wait_until(
            lambda: "provider" in (t := browser.find_element("css selector", "body").text) and t,
            what="the job's view with its provider",
        )
        # its request id (the three were submitted in whatever order their threads ran)
        request_id = jobs.get_job(project, made[0].job_id).parked["request_id"]
        assert request_id in parked_kinds.lines(folder, "submits.log") and request_id in view
    for job in made:
        jobs.cancel_job(project, job.job_id)
