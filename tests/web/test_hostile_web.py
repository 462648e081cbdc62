"""The web server against hostile requests: another page's POSTs (CSRF), hostile
query and body values, floods of event streams, a failing store, and the
headers every answer carries. Through an ASGI test client on both stores, and
a real uvicorn server where connections matter.

Another origin is what a browser says it is: ``Origin`` and ``Sec-Fetch-Site``
exactly as Chromium sends them from a page at ``http://localhost:18202`` (or
``http://127.0.0.1:18202``, the same *site*) to the tray at
``http://127.0.0.1:18201``; ``test_hostile_browser.py`` has the real browser.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import warnings

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from nw.jobs import JobsConfig, enqueue, get_job, list_jobs
from nw.jobs.core.kinds import register_kind, unregister_kind
from nw.jobs.web import create_app
from nw.jobs.web.inputs import MAX_JSON_DEPTH
from nw.jobs.web.security import SECURITY_HEADERS
from tests.helpers import wait_until
from tests.web.server import serving
from tests.web.test_fanout import Stream

KIND = "test.hostile"
TRAY = "http://127.0.0.1:18201"
TOKEN = "s3cret"
JSON = {"content-type": "application/json"}
SAME_ORIGIN = {**JSON, "origin": TRAY, "sec-fetch-site": "same-origin", "sec-fetch-mode": "cors"}
ATTACKS = {
    # fetch(url, {method: "POST", mode: "no-cors", body: '{"kind": ...}'}) from another site
    "no-cors fetch": {
        "content-type": "text/plain;charset=UTF-8",
        "origin": "http://localhost:18202",
        "sec-fetch-site": "cross-site",
        "sec-fetch-mode": "no-cors",
    },
    # <form method="post" enctype="text/plain"> on another port of the same host
    "text/plain form": {
        "content-type": "text/plain",
        "origin": "http://127.0.0.1:18202",
        "sec-fetch-site": "same-site",
        "sec-fetch-mode": "navigate",
    },
    # a browser without Sec-Fetch-* (only Origin says where it comes from)
    "Origin only": {"content-type": "text/plain", "origin": "http://127.0.0.1:18202"},
    # JSON from another origin (a browser would ask first; refused all the same)
    "JSON from another origin": {
        **JSON,
        "origin": "http://127.0.0.1:18202",
        "sec-fetch-site": "same-site",
        "sec-fetch-mode": "cors",
    },
    # a sandboxed frame or a redirect: the origin is opaque
    "opaque origin": {**JSON, "origin": "null"},
}


def fails(project, params):
    raise RuntimeError("the renderer fell over")


@pytest.fixture
def kind():
    register_kind(KIND, "tests.web.test_hostile_web:fails")
    yield KIND
    unregister_kind(KIND)


def jobs_state(project, cfg) -> list[tuple[str, str, int]]:
    """Every job's id, status and attempt: what an attack must leave as it was."""
    return sorted((j.job_id, j.status, j.attempt) for j in list_jobs(project, config=cfg))


def targets(project, cfg):
    """A queued job (to cancel) and a failed one (to retry), both of the registered kind."""
    queued = enqueue(project, KIND, {"n": 1}, config=cfg)
    failed = enqueue(project, KIND, {"n": 2}, dispatch={KIND: fails}, config=cfg)
    wait_until(
        lambda: (j := get_job(project, failed.job_id, config=cfg)) and j.status == "failed",
        what="the job to fail",
    )
    return queued, failed


def changes(queued, failed):
    """Each state-changing request: (method, path, body)."""
    create = json.dumps({"kind": KIND, "params": {"n": 3}, "approved": True})
    return [
        ("POST", "/api/jobs", create),
        ("POST", f"/api/jobs/{failed.job_id}/retry", '{"approved": true}'),
        ("POST", "/api/jobs/retry", '{"status": "failed", "approved": true}'),
        ("POST", f"/api/jobs/{queued.job_id}/cancel", ""),
    ]


def tray_client(project, cfg, token):
    cookies = {"nw_jobs_token": token} if token else None  # the browser's, from /?token=
    app = create_app([project], config=cfg, token=token, stream_max_s=1.0)
    return TestClient(app, base_url=TRAY, cookies=cookies)


# ----- 1. CSRF: another page changes nothing ---------------------------------------------------
@pytest.mark.parametrize("token", [None, TOKEN], ids=["no token", "token cookie"])
def test_another_page_can_neither_create_retry_nor_cancel(project, cfg, kind, token):
    # Given a tray with a queued job and a failed one (with a token, the
    # browser holds the tray's cookie, which a same-site page's requests carry)
    queued, failed = targets(project, cfg)
    client = tray_client(project, cfg, token)
    before = jobs_state(project, cfg)
    for name, headers in ATTACKS.items():
        for method, path, body in changes(queued, failed):
            # When another page sends the request, as a browser would
            response = client.request(method, path, content=body, headers=headers)
            # Then it is refused in one line naming why, and nothing changed
            assert response.status_code == 403, (name, path, response.text)
            (message,) = response.json().values()
            assert message.startswith(f"refused a {method} from another origin ("), message
            assert jobs_state(project, cfg) == before, (name, path)
    # When the tray's own page sends the same requests, they work (the attack was real)
    for method, path, body in changes(queued, failed):
        response = client.request(method, path, content=body or "{}", headers=SAME_ORIGIN)
        assert response.status_code in (200, 202), (path, response.text)
    after = {job_id: (status, attempt) for job_id, status, attempt in jobs_state(project, cfg)}
    assert len(after) == len(before) + 1  # one created
    assert after[queued.job_id][0] == "cancelled"
    assert after[failed.job_id][0] != "failed"  # retried (queued for a worker)


def test_a_refusal_says_what_is_wrong_in_one_line(project, cfg, kind):
    client = tray_client(project, cfg, None)
    body = json.dumps({"kind": KIND, "params": {}})
    foreign = client.post("/api/jobs", content=body, headers=ATTACKS["text/plain form"])
    assert foreign.status_code == 403
    assert foreign.json() == {
        "error": "refused a POST from another origin (Sec-Fetch-Site: same-site)"
    }
    older = client.post("/api/jobs", content=body, headers=ATTACKS["Origin only"])
    assert older.json() == {
        "error": "refused a POST from another origin (Origin: http://127.0.0.1:18202)"
    }
    # The page's own POST, or a script's, that is not JSON: 415
    for headers in ({**SAME_ORIGIN, "content-type": "text/plain"}, {}):
        plain = client.post("/api/jobs", content=body, headers=headers)
        assert plain.status_code == 415
        got = headers.get("content-type", "none")
        assert plain.json() == {"error": f"a POST needs Content-Type: application/json (got {got})"}
    form = client.post(
        "/api/jobs", content="kind=x", headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert form.status_code == 415
    assert jobs_state(project, cfg) == []


def test_who_may_change_a_job(project, cfg, kind):
    queued, _ = targets(project, cfg)
    body = json.dumps({"kind": KIND, "params": {}})
    # Without a token: the page itself (by Sec-Fetch-Site, or by Origin alone),
    # and a client that is no page (curl, a script: neither header)
    open_ = tray_client(project, cfg, None)
    own_origin = {**JSON, "origin": TRAY}
    behind_tls = {**JSON, "origin": TRAY.replace("http:", "https:")}  # a proxy's scheme
    for headers in (SAME_ORIGIN, own_origin, behind_tls, JSON):
        assert open_.post("/api/jobs", content=body, headers=headers).status_code == 202
    # With a token: the bearer header passes from anywhere (no page can know it)
    locked = tray_client(project, cfg, TOKEN)
    bearer = {**ATTACKS["JSON from another origin"], "authorization": f"Bearer {TOKEN}"}
    assert locked.post("/api/jobs", content=body, headers=bearer).status_code == 202
    # but a wrong bearer does not lift the origin check, and no token is still 401
    wrong = {**bearer, "authorization": "Bearer nope"}
    assert locked.post("/api/jobs", content=body, headers=wrong).status_code == 403
    bare = TestClient(create_app([project], config=cfg, token=TOKEN), base_url=TRAY)
    assert bare.post("/api/jobs", content=body, headers=JSON).status_code == 401
    # and the cookie from the page itself passes
    cancel = f"/api/jobs/{queued.job_id}/cancel"
    assert locked.post(cancel, headers=SAME_ORIGIN).status_code == 200


def test_another_page_cannot_read_the_api_but_a_link_opens_the_tray(project):
    client = tray_client(project, JobsConfig(), None)
    cross = {"origin": "http://localhost:18202", "sec-fetch-site": "cross-site"}
    for path in ("/api/summary", "/api/jobs", "/api/summary/events", "/static/tray.js"):
        for mode in ("cors", "no-cors"):
            response = client.get(path, headers={**cross, "sec-fetch-mode": mode})
            assert response.status_code == 403, (path, mode)
            assert response.json() == {
                "error": "refused a read from another origin (Sec-Fetch-Site: cross-site)"
            }
    link = client.get("/", headers={**cross, "sec-fetch-mode": "navigate"})
    assert link.status_code == 200
    own = client.get("/api/summary", headers={"sec-fetch-site": "same-origin"})
    assert own.status_code == 200


# ----- 2. the host guard, by address ------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.20", False),
        ("10.0.0.1", False),
    ],
)
def test_a_bind_address_is_judged_by_address_not_spelling(host, loopback):
    from nw.jobs.web.security import is_loopback

    assert is_loopback(host) is loopback


def test_the_host_guard_knows_every_loopback_spelling_and_no_other_name(project):
    app = create_app([project], allowed_hosts=("127.0.0.1", "localhost", "[::1]", "127.1"))
    for base in (
        "http://127.0.0.1:8765",
        "http://127.1:8765",
        "http://127.0.0.2:8765",
        "http://localhost:8765",
        "http://[::1]:8765",
    ):
        assert TestClient(app, base_url=base).get("/api/jobs").status_code == 200, base
    for base in (
        "http://rebind.example:8765",
        "http://127.0.0.1.rebind.example",
        "http://10.0.0.1",
    ):
        response = TestClient(app, base_url=base).get("/api/jobs")
        assert response.status_code == 400, base
        assert response.json() == {"error": "this server does not answer to that Host"}


# ----- 3. bounded event streams -----------------------------------------------------------------
def _answered(stream: Stream) -> bytes:
    """The stream's status line and headers, once they came."""
    return wait_until(
        lambda: stream.data.partition(b"\r\n\r\n")[0] if b"\r\n\r\n" in stream.data else b"",
        what="the stream's answer",
    )


def _whole_body(stream: Stream) -> bytes:
    """A short answer's body, once all of it came (its headers may come first)."""

    def whole() -> bytes:
        head, _, body = stream.data.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
             if line.startswith(b"content-length:")),
            None,
        )  # fmt: skip
        return body if length is not None and len(body) >= length else b""

    return wait_until(whole, what="the answer's whole body")


def _feed_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("nw-jobs feed")]


def test_streams_of_one_filter_share_a_poller_and_both_caps_answer_429(project):
    # Given a tray capped at 6 open streams and 2 watched values
    app = create_app([project], poll_interval_s=0.05, stream_max_s=60, max_streams=6, max_feeds=2)
    opened: list[Stream] = []

    def open_(path):
        stream = Stream(url, path)
        opened.append(stream)
        return _answered(stream)

    with serving(app) as url:
        try:
            # When four trays watch one actor and one another
            for _ in range(4):
                assert open_("/api/summary/events?actor=ann").startswith(b"HTTP/1.1 200")
            assert open_("/api/summary/events?actor=bob").startswith(b"HTTP/1.1 200")
            # Then each watched value has one poller, not one per connection
            wait_until(lambda: len(_feed_threads()) == 2, what="two pollers")
            assert sorted(_feed_threads()) == [
                "nw-jobs feed ('summary', 'ann')",
                "nw-jobs feed ('summary', 'bob')",
            ]
            # When a third actor is asked for: 429, no new thread
            third = open_("/api/summary/events?actor=cid")
            assert third.startswith(b"HTTP/1.1 429")
            assert b"retry-after: 5" in third.lower()
            body = json.loads(_whole_body(opened[-1]))
            assert body["error"].startswith("2 different things are being watched")
            # When a seventh stream is asked for (the cap is 6): 429 too
            assert open_("/api/summary/events?actor=ann").startswith(b"HTTP/1.1 200")
            seventh = open_("/api/summary/events?actor=ann")
            assert seventh.startswith(b"HTTP/1.1 429")
            assert b"6 event streams are open" in _whole_body(opened[-1])
            assert len(_feed_threads()) == 2
            # When one hangs up, its place is free again
            opened[0].sock.shutdown(socket.SHUT_RDWR)  # a FIN now, though a thread reads it

            def reopened():
                stream = Stream(url, "/api/summary/events?actor=ann")
                opened.append(stream)
                return _answered(stream).startswith(b"HTTP/1.1 200")

            wait_until(reopened, what="a closed stream's place to be free")
        finally:
            for stream in opened:
                stream.close()


def test_many_distinct_filters_cannot_grow_the_threads(project):
    app = create_app([project], poll_interval_s=0.05, stream_max_s=60, max_feeds=3)
    opened = []
    with serving(app) as url:
        try:
            for n in range(30):
                opened.append(Stream(url, f"/api/summary/events?actor=a{n}"))
                _answered(opened[-1])
            codes = [s.data.split(b" ", 2)[1] for s in opened]
            assert codes.count(b"200") == 3 and codes.count(b"429") == 27
            assert len(_feed_threads()) <= 3
        finally:
            for stream in opened:
                stream.close()


def test_the_caps_are_stated():
    from nw.jobs.web import streams

    assert streams.MAX_STREAMS >= 1 and streams.MAX_FEEDS >= 1
    assert "MAX_STREAMS" in streams.__doc__ and "429" in streams.__doc__


# ----- 4. a client's mistakes are 400s, never 500s, and never name the database -----------------
def _nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_deeply_nested_json_is_a_400_with_no_log(project, cfg, kind, caplog):
    # Given a tray with a failed job; and bodies nested past what is parsed
    _, failed = targets(project, cfg)
    app = create_app([project], config=cfg, max_body_bytes=1_000_000)
    client = TestClient(app, raise_server_exceptions=False)
    before = jobs_state(project, cfg)
    caplog.set_level(logging.DEBUG)
    for levels in (MAX_JSON_DEPTH + 1, 485, 100_000):
        deep = _nested(levels)
        for path, body in [
            ("/api/jobs", f'{{"kind": "{KIND}", "params": {{"a": {deep}}}}}'),
            ("/api/jobs", f'[{{"kind": "{KIND}", "params": {{"a": {deep}}}}}]'),
            (f"/api/jobs/{failed.job_id}/retry", f'{{"approved": {deep}}}'),
            ("/api/jobs/retry", f'{{"kind": {deep}}}'),
        ]:
            # When it is posted
            response = client.post(path, content=body, headers=JSON)
            # Then it is a 400 naming the problem, nothing written, nothing logged
            assert response.status_code == 400, (levels, path)
            # (a job's own fields are judged by the facade's door, in its words)
            assert "deeper than" in response.json()["error"], response.json()
        if levels < 1000:  # a longer URL is refused by the client itself
            query = {"kind": KIND, "params": f'{{"a": {deep}}}'}
            estimate = client.get("/api/estimate", params=query)
            assert estimate.status_code == 400, levels
            assert "deeper than" in estimate.json()["error"]
    assert jobs_state(project, cfg) == before
    assert [r for r in caplog.records if r.name.startswith("nw.jobs.web")] == []


def test_json_depth_is_counted_exactly():
    from starlette.exceptions import HTTPException

    from nw.jobs.web.inputs import json_value

    assert json_value(_nested(MAX_JSON_DEPTH), "x") is not None
    with pytest.raises(HTTPException, match="x nests deeper than"):
        json_value(_nested(MAX_JSON_DEPTH + 1), "x")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # a job's fields: the facade's door names them, in the API's and the CLI's words
        ('{"kind": "K", "params": {}, "label": "a\\u0000b"}', "label has a NUL character"),
        ('{"kind": "K", "params": {}, "actor": "\\u0000"}', "actor has a NUL character"),
        ('{"kind": "K", "params": {"x": ["ok", "\\u0000"]}}', "params.x[1] has a NUL"),
        ('{"kind": "K", "params": {"a\\u0000": 1}}', "has a NUL character"),
        ('{"kind": "K", "params": {}, "label": "\\ud800"}', "label has a lone surrogate"),
        ('{"kind": "K", "params": {"x": NaN}}', "the body is not valid JSON: NaN is not"),
        ('{"kind": "K", "params": {"x": -Infinity}}', "not valid JSON: -Infinity is not"),
    ],
)
def test_unstorable_body_values_are_a_400_naming_them(project, cfg, kind, body, message):
    client = TestClient(create_app([project], config=cfg), raise_server_exceptions=False)
    response = client.post("/api/jobs", content=body.replace('"K"', f'"{KIND}"'), headers=JSON)
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error
    assert jobs_state(project, cfg) == []


def test_a_body_that_is_not_utf8_is_a_400(project, cfg, kind):
    client = TestClient(create_app([project], config=cfg), raise_server_exceptions=False)
    body = f'{{"kind": "{KIND}", "params": {{}}, "label": "'.encode() + b'\xff"}'
    response = client.post("/api/jobs", content=body, headers=JSON)
    assert response.status_code == 400
    assert response.json()["error"].startswith("the body is not UTF-8")
    assert jobs_state(project, cfg) == []


QUERIES = [
    ("/api/jobs", "status"),
    ("/api/jobs", "kind"),
    ("/api/jobs", "actor"),
    ("/api/jobs", "grade"),
    ("/api/jobs", "q"),
    ("/api/jobs", "before"),
    ("/api/jobs", "project"),
    ("/api/summary", "actor"),
    ("/api/summary/events", "actor"),
    ("/api/estimate", "kind"),
    ("/api/estimate", "params"),
    ("/api/totals", "project"),
    ("/api/workers", "project"),
    ("/metrics", "project"),
]


@pytest.mark.parametrize(("path", "name"), QUERIES)
def test_a_nul_or_a_lone_surrogate_in_a_query_value_is_a_400_naming_it(
    project, cfg, kind, path, name
):
    # Given a project with a job in its store (so a filter would reach it)
    enqueue(project, KIND, {}, config=cfg)
    client = TestClient(create_app([project], config=cfg), raise_server_exceptions=False)
    for value, problem in (("a%00b", "has a NUL character"), ("%ED%A0%80", "is not UTF-8")):
        response = client.get(f"{path}?{name}={value}")
        assert response.status_code == 400, (path, name, value)
        assert response.json() == {"error": f"query parameter {name!r} {problem}"}
    # A query's name is checked too
    assert client.get(f"{path}?a%00b=1").json() == {
        "error": "a query parameter has a NUL character"
    }


def _no_database_detail(text: str, cfg) -> None:
    for secret in ("postgres", "127.0.0.1", "5432", "nw_web", "SELECT", "nw_jobs", "sqlite3"):
        assert secret not in text, secret
    if cfg.database_url:
        assert cfg.database_url.rsplit("/", 1)[1] not in text


def test_a_failing_store_is_a_generic_503_and_one_log_line(project, cfg, kind, caplog):
    # Given a project whose store fails: on PostgreSQL a database that does not
    # exist, on SQLite a file that is not a database
    enqueue(project, KIND, {"n": 1}, config=cfg)
    if cfg.database_url:
        broken = JobsConfig(database_url=cfg.database_url.rsplit("/", 1)[0] + "/nw_no_such_db")
    else:
        from nw.jobs.stores import close_shared_stores

        close_shared_stores()
        (project.root / ".nw" / "jobs" / "jobs.sqlite3").write_bytes(b"not a database " * 100)
        broken = cfg
    client = TestClient(create_app([project], config=broken), raise_server_exceptions=False)
    caplog.set_level(logging.WARNING, logger="nw.jobs.web")
    for method, path, body in [
        ("GET", "/api/jobs?actor=someone", None),
        ("GET", "/api/summary", None),
        ("POST", "/api/jobs", json.dumps({"kind": KIND, "params": {}, "label": "x"})),
    ]:
        caplog.clear()
        # When the client asks
        response = client.request(method, path, content=body, headers=JSON)
        # Then the answer says the store is unavailable, and nothing about it
        assert response.status_code == 503, path
        assert response.json() == {"error": "the job store is unavailable; see the server log"}
        _no_database_detail(response.text, broken)
        # and the server's log has the detail, in one line
        (record,) = [r for r in caplog.records if r.name == "nw.jobs.web"]
        assert "\n" not in record.getMessage() and record.exc_info is None
        assert ("nw_no_such_db" if cfg.database_url else "not a database") in record.getMessage()


def test_a_log_line_escapes_what_could_move_the_terminal():
    from nw.jobs.web.errors import loggable

    assert loggable("a\x1b[2Jb\nc\x00\x9b") == "a\\x1b[2Jb\\x0ac\\x00\\x9b"


# ----- 6. headers ------------------------------------------------------------------------------
def test_every_answer_forbids_framing_sniffing_referrers_and_foreign_scripts(project, kind):
    csp = SECURITY_HEADERS["content-security-policy"]
    for part in ("default-src 'self'", "frame-ancestors 'none'", "object-src 'none'"):
        assert part in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    open_ = TestClient(create_app([project]), base_url=TRAY)
    locked = TestClient(create_app([project], token=TOKEN), base_url=TRAY)
    answers = [
        open_.get("/"),
        open_.get("/static/tray.js"),
        open_.get("/api/summary"),
        open_.get("/api/nothing"),  # 404
        open_.post("/api/jobs", content="x", headers=ATTACKS["no-cors fetch"]),  # 403
        open_.post("/api/jobs", content="x"),  # 415
        open_.get("/api/jobs?q=%00"),  # 400
        locked.get("/api/summary"),  # 401
        locked.get(f"/?token={TOKEN}", follow_redirects=False),  # 303
    ]
    for response in answers:
        for name, value in SECURITY_HEADERS.items():
            assert response.headers.get(name) == value, (response.request.url, name)
    assert answers[0].headers["x-frame-options"] == "DENY"
    assert answers[0].headers["x-content-type-options"] == "nosniff"
    assert answers[0].headers["referrer-policy"] == "no-referrer"


def test_the_token_url_is_answered_with_a_redirect_that_replaces_it(project):
    client = TestClient(create_app([project], token=TOKEN), base_url=TRAY)
    response = client.get(f"/?token={TOKEN}", follow_redirects=False)
    # a 303 to the bare page: the browser replaces the token URL in its history
    assert (response.status_code, response.headers["location"]) == (303, "/")
    assert response.headers["cache-control"] == "no-store"
    assert TOKEN not in response.text
    cookie = response.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
