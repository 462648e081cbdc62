"""Hostile input is refused at the door, on both stores, with nothing written.

NUL, lone surrogates, control characters, nesting past ``MAX_DEPTH`` and
labels past ``MAX_LABEL_CHARS`` in every text field a caller gives: the
Python API raises ``InvalidInput`` (one line naming the field), POST /api/jobs
answers 400, and the project has no job afterwards (counted in the store
itself). On PostgreSQL none of it reaches the database (no 503 with SQL context).
"""

from __future__ import annotations

import json
import warnings

import pytest

from nw import jobs
from nw.errors import InvalidInput
from nw.jobs.core import kinds
from nw.jobs.core.checks import MAX_DEPTH, MAX_KEY_CHARS, MAX_LABEL_CHARS, MAX_NAME_CHARS
from nw.jobs.core.ids import MAX_UNITS
from tests.conftest import stored_jobs

pytest.importorskip("starlette")
with warnings.catch_warnings():  # newer Starlette nudges towards httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from nw.jobs.web import create_app

KIND = "t.hostile"


def nested(depth: int) -> dict:
    """Params nested ``depth`` levels deep (``{}`` is one level)."""
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


# (name, enqueue keyword arguments, a fragment the one-line message must hold)
REFUSED = [
    ("label surrogate", {"label": "bad \ud800 label"}, "label has a lone surrogate"),
    ("label NUL", {"label": "bad \x00 label"}, "label has a NUL character"),
    ("label ESC", {"label": "t \x1b]0;TITLE\x07"}, "label has a control character U+001B"),
    ("label newline", {"label": "two\nlines"}, "label has a control character U+000A"),
    ("label C1 CSI", {"label": "x \x9b31m"}, "label has a control character U+009B"),
    ("label bidi", {"label": "x \u202eevil"}, "label has a control character U+202E"),
    ("label too long", {"label": "x" * (MAX_LABEL_CHARS + 1)}, f"the limit is {MAX_LABEL_CHARS}"),
    ("huge label", {"label": "y" * 120_000}, "label is 120000 characters long"),
    ("param value surrogate", {"params": {"a": "x\ud800"}}, "params.a has a lone surrogate"),
    ("param value NUL", {"params": {"a": "x\x00"}}, "params.a has a NUL character"),
    (
        "deep param value NUL",
        {"params": {"a": [{"b": {"c": ["ok", "x\x00"]}}]}},
        "params.a[0].b.c[1] has a NUL",
    ),
    ("param key NUL", {"params": {"k\x00": 1}}, "params key at params['k\\x00']"),
    ("param key surrogate", {"params": {"k\udfff": 1}}, "has a lone surrogate"),
    ("param key ESC", {"params": {"in": {"k\x1b[2J": 1}}}, "params key at params.in["),
    ("params too deep", {"params": nested(MAX_DEPTH + 1)}, f"deeper than {MAX_DEPTH} levels"),
    ("params 500 deep", {"params": nested(500)}, f"deeper than {MAX_DEPTH} levels"),
    ("actor NUL", {"actor": "a\x00"}, "actor has a NUL character"),
    ("actor surrogate", {"actor": "a\ud800"}, "actor has a lone surrogate"),
    ("actor id ESC", {"actor": {"id": "a\x1b[31m"}}, "actor id has a control character"),
    ("actor handle surrogate", {"actor": {"id": "a", "handle": "h\ud800"}}, "actor handle has"),
    ("actor handle ESC", {"actor": {"id": "a", "handle": "\x1b]52;c;eA==\x07"}}, "actor handle"),
    ("actor too long", {"actor": "a" * (MAX_NAME_CHARS + 1)}, f"the limit is {MAX_NAME_CHARS}"),
    ("idempotency key NUL", {"idempotency_key": "k\x00"}, "idempotency_key has a NUL"),
    ("idempotency key surrogate", {"idempotency_key": "k\ud800"}, "idempotency_key has a lone"),
    ("idempotency key ESC", {"idempotency_key": "k\x1b"}, "idempotency_key has a control"),
    ("units past MAX_UNITS", {"params": {"units": MAX_UNITS + 1}}, "units'] must be at most"),
    ("int past a float", {"params": {"n": [10**309]}}, "params.n[0] is a number past"),
    ("huge estimate", {"params": {"estimated_usd": 10**400}}, "params.estimated_usd is a"),
    (
        "idempotency key too long",
        {"idempotency_key": "k" * (MAX_KEY_CHARS + 1)},
        f"the limit is {MAX_KEY_CHARS}",
    ),
]
API_ONLY = [  # fields POST /api/jobs does not take
    ("kind NUL", {"kind": f"{KIND}\x00"}, "kind has a NUL character"),
    ("kind surrogate", {"kind": f"{KIND}\ud800"}, "kind has a lone surrogate"),
    ("limit key NUL", {"limit_key": "fal:\x00"}, "a limit key has a NUL"),
    ("limit key ESC", {"limit_key": "fal:\x1b[2J"}, "a limit key has a control character"),
    ("not_before past 9999", {"not_before": 1e300}, "not_before must be from 0 to"),
    ("not_before before 1970", {"not_before": -1e300}, "not_before must be from 0 to"),
]


def registered_body(project, params):  # run by a worker; never here
    return {"ok": True}


@pytest.fixture(autouse=True)
def registered_kind():
    jobs.register_kind(KIND, "tests.integration.test_hostile_input:registered_body")
    yield
    kinds.unregister_kind(KIND)


def call(project, cfg, fields: dict):
    fields = dict(fields)
    return jobs.enqueue(
        project, fields.pop("kind", KIND), fields.pop("params", {"n": 1}), config=cfg, **fields
    )


def one_line(exc: BaseException) -> str:
    message = str(exc)
    assert "\n" not in message and message.isprintable(), message
    return message


def ids(cases):
    return [name for name, _, _ in cases]


# ----- the Python API ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "fields", "said"), REFUSED + API_ONLY, ids=ids(REFUSED + API_ONLY)
)
def test_enqueue_refuses_hostile_input_and_writes_nothing(project, cfg, name, fields, said):
    call(project, cfg, {"idempotency_key": "warm-up"})  # the store exists: a write could land
    with pytest.raises(InvalidInput) as refused:
        call(project, cfg, fields)
    assert said in one_line(refused.value)
    assert stored_jobs(project, cfg) == 1
    assert [j.idempotency_key for j in jobs.list_jobs(project, config=cfg)] == ["warm-up"]


@pytest.mark.parametrize(
    ("name", "fields", "said"), REFUSED + API_ONLY, ids=ids(REFUSED + API_ONLY)
)
def test_one_bad_item_refuses_the_whole_batch(project, cfg, name, fields, said):
    good = {"kind": KIND, "params": {"n": 1}}
    bad = {"kind": KIND, "params": {"n": 2}, **fields}
    with pytest.raises(InvalidInput) as refused:
        jobs.enqueue_many(project, [good, bad, good], config=cfg)
    message = one_line(refused.value)
    assert message.startswith("item 1: ") and said in message
    assert stored_jobs(project, cfg) == 0
    assert jobs.list_jobs(project, config=cfg) == []


@pytest.mark.parametrize(
    ("params", "said"),
    [
        ({"a": "x\x00"}, "params.a has a NUL"),
        ({"a": ["\ud800"]}, "params.a[0] has a lone surrogate"),
        ({"k\x1b": 1}, "params key"),
        (nested(500), "deeper than"),
    ],
)
def test_estimate_refuses_what_enqueue_refuses(project, cfg, params, said):
    with pytest.raises(InvalidInput) as refused:
        jobs.estimate(project, KIND, params, config=cfg)
    assert said in one_line(refused.value)
    with pytest.raises(InvalidInput, match="kind has a NUL"):
        jobs.estimate(project, "k\x00", {}, config=cfg)
    assert stored_jobs(project, cfg) == 0


@pytest.mark.parametrize(
    ("filters", "said"),
    [
        ({"kind": "k\x00"}, "kind has a NUL"),
        ({"actor": "a\x00"}, "actor has a NUL"),
        ({"actor": "a\ud800"}, "actor has a lone surrogate"),
        ({"q": "\x00"}, "q has a NUL"),
        ({"q": "\udc80"}, "q has a lone surrogate"),
        ({"q": "x\x1b"}, "q has a control character"),
        ({"q": "q" * (MAX_NAME_CHARS + 1)}, f"the limit is {MAX_NAME_CHARS}"),
    ],
)
def test_list_filters_are_refused_before_the_store(project, cfg, filters, said):
    call(project, cfg, {})
    with pytest.raises(InvalidInput) as refused:
        jobs.list_jobs(project, config=cfg, **filters)
    assert said in one_line(refused.value)
    if "actor" in filters:
        with pytest.raises(InvalidInput, match="actor has"):
            jobs.spend(project, actor=filters["actor"], config=cfg)
    if "kind" in filters:
        with pytest.raises(InvalidInput, match="kind has a NUL"):
            jobs.retry_jobs(project, kind=filters["kind"], config=cfg)
    assert stored_jobs(project, cfg) == 1


def test_set_limit_refuses_a_hostile_key(project, cfg):
    with pytest.raises(InvalidInput, match="a limit key has a NUL"):
        jobs.set_limit(project, "k\x00", max_running=1, config=cfg)
    assert jobs.list_limits(project, config=cfg) == []


def test_a_title_in_params_makes_a_safe_label(project, cfg):
    # params values may hold a newline (a prompt); the label read from them may not
    job = call(project, cfg, {"params": {"title": "two\nlines \x1b[2J" + "z" * 1000}})
    assert job.label.startswith("two lines  [2J")
    assert len(job.label) == MAX_LABEL_CHARS and job.label.endswith("…")
    assert job.params["title"].startswith("two\nlines \x1b[2J")  # the params keep it


def test_what_the_door_accepts_is_stored_and_read_back_intact(project, cfg):
    label = "café 🎬 [bold]not markup[/bold] :fire: — 東京"
    params = {
        "prompt": "line one\nline two\ttab \x1b[31m in a value",
        "deep": nested(MAX_DEPTH - 1),
    }  # MAX_DEPTH in all
    actor = {"id": "user-7", "handle": "Zoë ✓"}
    job = call(project, cfg, {"label": label, "params": params, "actor": actor})
    [read] = jobs.list_jobs(project, config=cfg)
    assert read.job_id == job.job_id
    assert (read.label, read.params, read.actor) == (label, params, actor)


def test_a_stored_time_past_year_9999_does_not_break_reads(project, cfg):
    # a row written before the checks (or an ETA scaled past any calendar): the
    # project's reads still answer, that time shown as unknown
    old = call(project, cfg, {"idempotency_key": "old"})
    store = jobs.stores.shared_store(project, cfg, create=True)
    store.patch(old.job_id, {"not_before": 1e300, "eta_p50": 1e300, "eta_p90": 1e300}, attempt=0)
    [job] = jobs.list_jobs(project, config=cfg)
    assert jobs.to_dict(job)["not_before"] is None
    assert jobs.summarize(project, config=cfg) is not None


# ----- POST /api/jobs ------------------------------------------------------------------
@pytest.fixture
def client(project, cfg):
    # a body of up to 1 MB: the 120,000-character label reaches the door (not the 413)
    return TestClient(create_app([project], config=cfg, max_body_bytes=1_000_000))


def post(client, body) -> object:
    """The body as JSON text (ASCII, so a lone surrogate travels as ``\\ud800``)."""
    return client.post(
        "/api/jobs", content=json.dumps(body), headers={"content-type": "application/json"}
    )


@pytest.mark.parametrize(("name", "fields", "said"), REFUSED, ids=ids(REFUSED))
def test_post_answers_400_and_writes_nothing(client, project, cfg, name, fields, said):
    body = {"kind": KIND, "params": {"n": 1}, **fields}
    response = post(client, body)
    assert response.status_code == 400, response.text
    assert said in response.json()["error"]
    assert stored_jobs(project, cfg) == 0
    listed = client.get("/api/jobs")
    assert listed.status_code == 200 and listed.json()["jobs"] == []


@pytest.mark.parametrize(("name", "fields", "said"), REFUSED, ids=ids(REFUSED))
def test_post_of_a_batch_with_one_bad_item_answers_400(client, project, cfg, name, fields, said):
    items = [{"kind": KIND, "params": {"n": 1}}, {"kind": KIND, "params": {"n": 2}, **fields}]
    response = post(client, items)
    assert response.status_code == 400, response.text
    assert response.json()["error"].startswith("item 1: ")
    assert stored_jobs(project, cfg) == 0


@pytest.mark.parametrize(
    "query", ["q=%00", "kind=k%00", "actor=a%00", "q=x%1B%5D0%3BT%07", "actor=" + "a" * 201]
)
def test_list_filters_answer_400_over_http(client, project, cfg, query):
    assert post(client, {"kind": KIND, "params": {}}).status_code == 202
    response = client.get(f"/api/jobs?{query}")
    assert response.status_code == 400, response.text
    assert " has " in response.json()["error"] or "limit" in response.json()["error"]
    assert stored_jobs(project, cfg) == 1


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (f'{{"kind": "{KIND}", "params": {{"n": {"1" * 5000}}}}}', "a number too long"),
        (f'{{"kind": "{KIND}", "params": {"[" * 5000 + "]" * 5000}}}', "deeper than"),
        ("[" * 5000 + "]" * 5000, "deeper than"),
    ],
    ids=["int past the digit limit", "params past the parser's stack", "a batch past it"],
)
def test_a_body_json_cannot_read_answers_400(client, project, cfg, text, said):
    response = client.post("/api/jobs", content=text, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert said in response.json()["error"]
    assert stored_jobs(project, cfg) == 0
