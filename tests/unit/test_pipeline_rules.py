"""The pure rules of pipelines (nw/jobs/core/pipelines.py): a spec read or
refused in one line, its order and identity, how a new waiting job starts,
a pipeline's status and its critical-path ETA."""

from __future__ import annotations

import pytest

from nw.errors import InvalidInput
from nw.jobs.core.pipelines import (
    Edge,
    critical_eta,
    order,
    read_steps,
    spec_hash,
    start_of,
    status_of,
    stopped_by,
)


def test_a_cycle_is_refused_naming_it():
    steps = {
        "a": {"kind": "k"},
        "b": {"kind": "k", "after": ["a", "d"]},
        "c": {"kind": "k", "after": ["b"]},
        "d": {"kind": "k", "after": ["c"]},
    }
    with pytest.raises(
        InvalidInput,
        match=r"^pipeline has a cycle: (b -> c -> d -> b|c -> d -> b -> c|d -> b -> c -> d)$",
    ):
        read_steps(steps)
    with pytest.raises(InvalidInput, match="pipeline has a cycle: a -> a"):
        read_steps({"a": {"kind": "k", "after": ["a"]}})


@pytest.mark.parametrize(
    ("steps", "words"),
    [
        ([], "steps must be a mapping"),
        ({"a": {"kind": "k", "after": "b"}}, "'after' must be a list"),
        ({"a": {"kind": "k", "after": [{"step": "b", "why": 1}]}}, "an 'after' entry"),
        ({"a": {"kind": "k", "after": [{"step": "b", "allow_failure": "yes"}]}}, "true or false"),
        ({"a": {"params": {}}}, "needs a 'kind'"),
        ({"a": {"kind": "k", "colour": 1}}, "unknown field(s) 'colour'"),
        ({"a\x1b[2J": {"kind": "k"}}, "step name"),
        ({"a": {"kind": "k", "after": ["zz"]}}, "unknown step 'zz'"),
    ],
)
def test_a_bad_spec_is_one_line_naming_the_problem(steps, words):
    with pytest.raises(InvalidInput) as got:
        read_steps(steps)
    assert words in str(got.value) and "\n" not in str(got.value)


def test_order_puts_upstreams_first_and_the_hash_ignores_spelling_order():
    spec = {
        "cut": {"kind": "k", "after": ["p1", "p2"]},
        "p2": {"kind": "k", "after": ["board"]},
        "p1": {"kind": "k", "after": [{"step": "board", "allow_failure": True}]},
        "board": {"kind": "k"},
    }
    steps = read_steps(spec)
    got = order(steps)
    assert got.index("board") < got.index("p1") < got.index("cut") and got.index("p2") < got.index(
        "cut"
    )
    again = read_steps(dict(reversed(list(spec.items()))))
    assert spec_hash("proj", steps) == spec_hash("proj", again)
    assert spec_hash("proj", steps) != spec_hash("other", steps)
    changed = read_steps({**spec, "board": {"kind": "k", "params": {"x": 1}}})
    assert spec_hash("proj", changed) != spec_hash("proj", steps)


def test_a_new_waiting_job_starts_by_its_upstreams_states():
    edges = [
        Edge("u1", "j", "one"),
        Edge("u2", "j", "two", allow_failure=True),
        Edge("u3", "k", "three"),
    ]
    states = {"u1": ("succeeded", "one"), "u2": ("failed", "two"), "u3": ("running", "three")}
    start = start_of(["j", "k"], edges, states)
    assert start.released == ["j"] and start.unmet == {"j": 0, "k": 1} and start.doomed == {}
    doomed = start_of(["k"], edges, {"u3": ("cancelled", "three")})
    assert doomed.doomed == {"k": ("three", "cancelled")} and doomed.released == []
    assert stopped_by("three", "cancelled") == "cancelled: upstream step 'three' was cancelled"
    with pytest.raises(InvalidInput, match="names no job"):
        start_of(["k"], edges, {})


def test_status_and_critical_path():
    assert status_of(["succeeded", "queued"]) == "running"
    assert status_of(["queued", "queued"]) == "queued"
    assert status_of(["succeeded", "failed", "cancelled"]) == "failed"
    assert status_of(["succeeded", "cancelled"]) == "cancelled"
    assert status_of(["succeeded"]) == "succeeded"
    after = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    states = dict.fromkeys(after, "queued")
    per, whole = critical_eta(after, {"a": 10, "b": 5, "c": 20, "d": 1}, states)
    assert (
        per == {"a": 10, "b": 15, "c": 30, "d": 31} and whole == 31
    )  # a waiting step counts its upstream
    per, whole = critical_eta(
        after, {"a": 0, "b": 5, "c": None, "d": 1}, {**states, "a": "succeeded"}
    )
    assert per["b"] == 5 and per["d"] is None and whole is None
