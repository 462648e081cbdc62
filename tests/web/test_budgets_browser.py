"""The console's budget panel in headless Chromium: a stored budget shown as
spent of cap, and a retry past it refused by the page, naming that budget.

Real components: the app served by uvicorn, an in-process body, the stored
policy in the project's file, the ``browser`` fixture (``tests/web/conftest.py``).
"""

from __future__ import annotations

import pytest

from nw import jobs
from nw.jobs.core.kinds import register_kind, unregister_kind
from nw.jobs.core.model import JobsConfig
from tests.helpers import wait_until

pytestmark = pytest.mark.slow
pytest.importorskip("uvicorn")


def fails(project, params):
    raise RuntimeError("the model timed out")


def paid(project, params):
    return {"cost_usd_actual": 0.2, "has_unknown_costs": False}


def test_a_budget_is_shown_spent_of_cap_and_a_retry_past_it_is_refused_by_name(browser, project):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    config = JobsConfig()  # the app's own config sets no cap: the stored budget is the gate
    register_kind("t.noop", "tests.fixtures.bodies:noop")
    try:
        spent = jobs.enqueue(project, "t.noop", {"estimated_usd": 0.2}, dispatch={"t.noop": paid})
        failed = jobs.enqueue(
            project, "t.noop", {"title": "Costly", "estimated_usd": 0.6}, dispatch={"t.noop": fails}
        )
        for job in (spent, failed):
            wait_until(lambda j=job: jobs.get_job(project, j.job_id).is_terminal)
        # Given a budget of $0.50 a day, $0.20 of it spent
        jobs.set_budget(project, 0.5, per="day")
        with serving(create_app([project], config=config, poll_interval_s=0.2)) as url:
            browser.get(f"{url}/")
            # Then the console shows it as spent of cap
            row = wait_until(
                lambda: browser.find_elements(
                    "css selector", '#budgets .budget[data-key="all/day"]'
                ),
                what="the budget panel",
            )[0]
            assert "$0.20 of $0.50" in row.text and "per day (UTC)" in row.text
            assert "$0.30 left" in row.text
            # When a person retries the $0.60 job from its view
            browser.get(f"{url}/#job={failed.job_id}")
            wait_until(
                lambda: browser.find_elements(
                    "css selector", f'#detail[data-job-id="{failed.job_id}"][data-status="failed"]'
                ),
                what="the failed job's view",
            )
            browser.find_element("css selector", "#detail button.retry").click()
            # Then the page says it was refused, and by which budget
            message = wait_until(
                lambda: (
                    (m := browser.find_element("css selector", "#detail-message").text)
                    and "Retry failed" in m
                    and m
                ),
                what="the refusal",
            )
            assert "budget 'all/day' $0.50" in message and "$0.60" in message
            assert jobs.get_job(project, failed.job_id).status == "failed"  # nothing written
    finally:
        unregister_kind("t.noop")
