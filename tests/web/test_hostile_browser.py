"""Another page in the same browser cannot drive the tray; the tray's own buttons can.

A real Chromium (the ``browser`` fixture) visits an attacker's page served by
``http.server`` on another port of the same host, as ``http://127.0.0.1:P``
(the tray's *site*: a SameSite cookie rides its requests) and as
``http://localhost:P`` (another site). The page tries what the review did:
``fetch(..., {mode: "no-cors"})`` POSTs, JSON POSTs, and ``<form
enctype="text/plain">`` (and an ordinary form) submitted at the tray, to
create, retry, bulk-retry and cancel; with no token and with the token's
cookie set in the browser first by ``/?token=``. Every request reaches the
server (it records them) and is refused; no job changes. Then the same
browser's tray cancels and retries with its buttons, with no CSP violation,
and the token URL is not in its history.
"""

from __future__ import annotations

import html
import http.server
import json
import threading
from urllib.parse import urlparse

import pytest

from nw.jobs import DEFAULT_CONFIG, enqueue, get_job
from nw.jobs.core.kinds import register_kind, unregister_kind
from tests.helpers import wait_until
from tests.web.test_hostile_web import jobs_state

pytestmark = pytest.mark.slow
pytest.importorskip("uvicorn")

KIND = "test.hostile.browser"
TOKEN = "browser-hostile-token"
CSP_WATCH = """
window.__csp = [];
document.addEventListener("securitypolicyviolation",
  (e) => window.__csp.push(e.violatedDirective + " " + e.blockedURI));
"""


def fails(project, params):
    raise RuntimeError("the renderer fell over")


class Recorder:
    """The tray app, with a note of each request that reaches it and its answer."""

    def __init__(self, app):
        self.app, self.state, self.seen = app, app.state, []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        note = {
            "method": scope["method"],
            "path": scope["path"],
            "origin": headers.get("origin"),
            "site": headers.get("sec-fetch-site"),
            "cookie": "nw_jobs_token=" in headers.get("cookie", ""),
        }

        async def noted(message):
            if message["type"] == "http.response.start":
                note["status"] = message["status"]
                self.seen.append(note)
            await send(message)

        await self.app(scope, receive, noted)


def accepted(recorder: Recorder) -> list[dict]:
    """The POSTs the tray answered with success."""
    return [n for n in recorder.seen if n["method"] == "POST" and n["status"] < 400]


def attacker_pages(tray: str, queued: str, failed: str) -> dict[str, str]:
    """The attacker's pages by path: one running every fetch, one per form."""
    create = json.dumps({"kind": KIND, "params": {"n": 99}, "approved": True})
    changes = [
        ("/api/jobs", create),
        (f"/api/jobs/{failed}/retry", '{"approved": true}'),
        ("/api/jobs/retry", '{"status": "failed", "approved": true}'),
        (f"/api/jobs/{queued}/cancel", "{}"),
    ]
    calls = json.dumps([[tray + path, body] for path, body in changes])
    pages = {
        "/fetch": f"""<!doctype html><title>cute cats</title><script>
window.done = false;
(async () => {{
  for (const [url, body] of {calls}) {{
    // the review's request: a simple POST, the body JSON, the type text/plain
    try {{ await fetch(url, {{method: "POST", mode: "no-cors", credentials: "include", body}}); }}
    catch (e) {{}}
    // JSON for real: the browser must ask first (a preflight), and is told nothing
    try {{ await fetch(url, {{method: "POST", credentials: "include",
                            headers: {{"content-type": "application/json"}}, body}}); }}
    catch (e) {{}}
  }}
  window.done = true;
}})();
</script>""",
    }
    for n, (path, body) in enumerate(changes):
        # text/plain: the field's name=value is sent verbatim, so it spells the JSON body
        name, value = body[:-1] + ', "pad": "', '"}'
        pages[f"/plain{n}"] = (
            f'<!doctype html><form method="post" enctype="text/plain" action="{tray}{path}">'
            f'<input name="{html.escape(name)}" value="{html.escape(value)}"></form>'
            "<script>document.forms[0].submit()</script>"
        )
        pages[f"/urlencoded{n}"] = (
            f'<!doctype html><form method="post" action="{tray}{path}">'
            '<input name="approved" value="true"></form>'
            "<script>document.forms[0].submit()</script>"
        )
    return pages


class AttackerSite:
    """``http.server`` on another port of 127.0.0.1, serving the attacker's pages."""

    def __init__(self, pages: dict[str, str]):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                page = pages.get(urlparse(self.path).path)
                data = (page or "not here").encode()
                self.send_response(200 if page else 404)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _attack(browser, origin: str, pages: dict[str, str], tray: str, recorder) -> None:
    """Every attack of ``pages`` from ``origin``; returns when each reached the tray."""
    before = len(recorder.seen)
    browser.get(f"{origin}/fetch")
    wait_until(lambda: browser.execute_script("return window.done"), what="the fetches")
    forms = sorted(p for p in pages if p != "/fetch")
    for path in forms:
        browser.get(f"{origin}{path}")
        # the form's POST navigates the browser to the tray's answer
        wait_until(lambda: browser.current_url.startswith(tray), what=f"{path} to be posted")
        wait_until(lambda: "refused" in browser.page_source, what=f"{path}'s refusal")
    arrived = recorder.seen[before:]
    posts = [n for n in arrived if n["method"] == "POST"]
    # Each no-cors fetch and each form arrived (the browser did send them) ...
    assert len(posts) == 4 + len(forms), arrived
    # ... and was refused for its origin; the JSON fetches never got past the preflight
    assert {n["status"] for n in posts} == {403}, posts
    preflights = [n for n in arrived if n["method"] == "OPTIONS"]
    assert len(preflights) == 4 and {n["status"] for n in preflights} == {403}, arrived
    assert all(n["origin"] != tray for n in posts)


@pytest.mark.parametrize("token", [None, TOKEN], ids=["no token", "token cookie"])
def test_a_page_on_another_port_cannot_drive_the_tray_but_the_tray_can(browser, project, token):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    # Given a tray with a queued job and a failed one of a registered kind
    register_kind(KIND, "tests.web.test_hostile_browser:fails")
    try:
        queued = enqueue(project, KIND, {"n": 1})
        failed = enqueue(project, KIND, {"n": 2}, dispatch={KIND: fails})
        wait_until(
            lambda: (j := get_job(project, failed.job_id)) and j.status == "failed",
            what="the job to fail",
        )
        recorder = Recorder(create_app([project], token=token, poll_interval_s=0.2))
        browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": CSP_WATCH})
        with serving(recorder) as tray:
            if token:  # the operator opened the token link: the browser holds the cookie
                browser.get(f"{tray}/?token={token}")
                wait_until(lambda: browser.current_url == f"{tray}/", what="the bare page")
                history = browser.execute_cdp_cmd("Page.getNavigationHistory", {})
                assert all("token" not in e["url"] for e in history["entries"]), history
            before = jobs_state(project, DEFAULT_CONFIG)
            pages = attacker_pages(tray, queued.job_id, failed.job_id)
            with AttackerSite(pages) as site:
                # When a page on another port of the same host attacks (same site) ...
                _attack(browser, f"http://127.0.0.1:{site.port}", pages, tray, recorder)
                if token:  # (its requests carried the tray's cookie: it proved nothing)
                    assert any(n["cookie"] for n in recorder.seen if n["method"] == "POST")
                # ... and from another site
                _attack(browser, f"http://localhost:{site.port}", pages, tray, recorder)
            # Then nothing was created, retried or cancelled
            assert jobs_state(project, DEFAULT_CONFIG) == before

            # When the operator uses the tray's own buttons in the same browser
            browser.get(f"{tray}/")
            card = f'article[data-job-id="{queued.job_id}"] button.cancel'
            wait_until(lambda: browser.find_elements("css selector", card), what="the card")[
                0
            ].click()
            # Then Cancel cancels
            wait_until(
                lambda: get_job(project, queued.job_id).status == "cancelled",
                what="the tray's Cancel to cancel",
            )
            # and Retry retries (the job goes back to the workers' queue)
            browser.get(f"{tray}/#job={failed.job_id}")
            retry = "#detail button.retry"
            wait_until(lambda: browser.find_elements("css selector", retry), what="Retry")[
                0
            ].click()
            wait_until(
                lambda: get_job(project, failed.job_id).status == "queued",
                what="the tray's Retry to requeue the job",
            )
            # with the page's policy intact: nothing it needs was blocked
            assert browser.execute_script("return window.__csp") == []
            # (the answer is noted after the store was written: wait for the second)
            wait_until(lambda: len(accepted(recorder)) == 2, what="the tray's POSTs")
            own = accepted(recorder)
            assert all(n["site"] == "same-origin" for n in own), own
    finally:
        unregister_kind(KIND)


def test_the_page_runs_under_its_policy_without_a_violation(browser, project):
    from nw.jobs.web import create_app
    from tests.web.server import serving

    browser.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": CSP_WATCH})
    with serving(create_app([project], poll_interval_s=0.2)) as tray:
        browser.get(f"{tray}/")
        wait_until(lambda: browser.execute_script("return typeof costOf === 'function'"))
        for view in ("#history", "#workers", "#"):
            browser.get(f"{tray}/{view}")
            wait_until(
                lambda: (
                    browser.find_element("css selector", "#conn").get_attribute("data-state")
                    == "live"
                ),
                what=f"{view} to be live",
            )
        assert browser.execute_script("return window.__csp") == []
        # and the policy is there to be violated: an inline script is refused
        browser.execute_script(
            "const s = document.createElement('script'); s.textContent = 'window.x = 1';"
            "document.body.appendChild(s);"
        )
        wait_until(lambda: browser.execute_script("return window.__csp.length"), what="a report")
        assert browser.execute_script("return window.x") is None
