"""Any JSON-able input to ``enqueue`` or POST /api/jobs is either accepted, then
listed and shown by the CLI's renderer without a raw control character, or
refused with ``InvalidInput`` / a 400 and nothing written; never a 500 or
another exception. Both stores; a modest number of examples each."""

from __future__ import annotations

import io
import json
import os
import warnings

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from nw import jobs
from nw.errors import InvalidInput
from nw.jobs.core import kinds
from tests.conftest import stored_jobs

pytest.importorskip("starlette")
with warnings.catch_warnings():  # newer Starlette nudges towards httpx2; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from nw.jobs.web import create_app

KIND = "t.property"

# Text that reaches for every rule: NUL, lone surrogates, C0/C1 controls, the
# bidirectional override, markup and emoji codes, and ordinary text.
HOSTILE = st.sampled_from(
    ["\x00", "\ud800", "\udfff", "\x1b", "\x07", "\n", "\x9b", "\u202e", "[/x]", ":fire:", "é"]
)
TEXT = st.one_of(
    st.text(max_size=12),
    st.lists(st.one_of(HOSTILE, st.text(max_size=3)), max_size=6).map("".join),
)
NUMBERS = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([2**63, -(2**63) - 1, 10**4299, 1.5e308, -0.0, 1e-320]),
    st.floats(allow_nan=False, allow_infinity=False),
)
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
KEYS = st.one_of(TEXT, st.sampled_from(["title", "label", "units", "estimated_usd", "seed"]))
JSON = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(KEYS, inner, max_size=3)),
    max_leaves=12,
)


@st.composite
def deep(draw) -> dict:
    """Params nested around the depth limit."""
    value: object = draw(LEAVES)
    for _ in range(draw(st.integers(min_value=0, max_value=40))):
        value = {"a": value} if draw(st.booleans()) else [value]
    return {"v": value}


PARAMS = st.one_of(st.dictionaries(KEYS, JSON, max_size=4), deep())
ACTOR = st.one_of(
    st.none(),
    TEXT,
    st.fixed_dictionaries({"id": TEXT}, optional={"handle": TEXT}),
    NUMBERS,
)
REQUEST = st.fixed_dictionaries(
    {"params": PARAMS},
    optional={
        "label": st.one_of(st.none(), TEXT, st.text(min_size=490, max_size=510)),
        "actor": ACTOR,
        "idempotency_key": st.one_of(st.none(), TEXT),
    },
)
# Always tried first: what the door lets through to the renderer (controls in a
# params value), and what it must stop.
SHOWN = {"params": {"prompt": "\x1b]0;T\x07 \x9b31m \u202e [/x] :fire:"}, "label": "[bold]x"}
STOPPED = {"params": {"p": "\x00"}, "label": "\ud800", "actor": {"id": "a", "handle": "\x1b"}}
SETTINGS = settings(
    max_examples=int(os.environ.get("NW_PROPERTY_EXAMPLES", "40")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def registered_body(project, params):  # run by a worker; never here
    return {"ok": True}


@pytest.fixture(autouse=True)
def registered_kind():
    jobs.register_kind(KIND, "tests.integration.test_input_properties:registered_body")
    yield
    kinds.unregister_kind(KIND)


def shown_safely(job: dict) -> None:
    """The CLI's renderer shows the job, and nothing it writes holds a raw
    control character (the only ones left are the renderer's own newlines)."""
    from rich.console import Console

    from nw.cli.render import job_detail, jobs_table, plain_line, shown_json

    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None, markup=False, emoji=False)
    console.print(jobs_table([job]))
    console.print(job_detail(job, []))
    out.write(plain_line(job) + "\n" + shown_json(job) + "\n")
    text = out.getvalue()
    text.encode("utf-8")  # no lone surrogate left
    assert not any(c in text for c in ("\x1b", "\x07", "\x00", "\x9b", "\u202e")), text


def check_accepted(project, cfg, job_id: str) -> None:
    listed = {j.job_id: j for j in jobs.list_jobs(project, limit=10_000, config=cfg)}
    assert job_id in listed
    shown_safely(jobs.to_dict(listed[job_id]))


@given(request=REQUEST)
@example(request=SHOWN)
@example(request=STOPPED)
@SETTINGS
def test_enqueue_accepts_and_shows_or_refuses_and_writes_nothing(project, cfg, request):
    before = stored_jobs(project, cfg)
    try:
        job = jobs.enqueue(project, KIND, request["params"], config=cfg, **_fields(request))
    except InvalidInput as exc:
        event(f"refused: {type(exc).__name__}")
        assert "\n" not in str(exc) and str(exc).isprintable()
        assert stored_jobs(project, cfg) == before
        return
    event("accepted")
    check_accepted(project, cfg, job.job_id)


@given(request=REQUEST)
@example(request=SHOWN)
@example(request=STOPPED)
@SETTINGS
def test_post_accepts_and_lists_or_answers_400_and_writes_nothing(project, cfg, request):
    client = TestClient(create_app([project], config=cfg), raise_server_exceptions=False)
    before = stored_jobs(project, cfg)
    body = {"kind": KIND, "params": request["params"], **_fields(request)}
    try:
        text = json.dumps(body)  # ASCII: a lone surrogate travels as \ud800
    except ValueError:  # an int past Python's digit limit: no JSON text to send
        return
    response = client.post("/api/jobs", content=text, headers={"content-type": "application/json"})
    assert response.status_code in (202, 400), response.text
    event(f"answered {response.status_code}")
    if response.status_code == 400:
        assert response.json()["error"]
        assert stored_jobs(project, cfg) == before
        return
    job_id = response.json()["job_id"]
    listed = client.get("/api/jobs?limit=1000")
    assert listed.status_code == 200, listed.text
    assert job_id in [j["job_id"] for j in listed.json()["jobs"]]
    assert client.get("/api/summary").status_code == 200
    check_accepted(project, cfg, job_id)


def _fields(request: dict) -> dict:
    return {k: v for k, v in request.items() if k != "params"}


def test_an_int_past_pythons_digit_limit_is_refused(project, cfg):
    # (not drawn above: hypothesis cannot print it when it reports an example)
    with pytest.raises(InvalidInput, match="params"):
        jobs.enqueue(project, KIND, {"n": 10**4400}, config=cfg)
    assert stored_jobs(project, cfg) == 0
