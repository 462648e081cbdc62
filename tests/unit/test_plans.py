"""plan_hash: falaw's own for a falaw plan, canonical and blind to cost for any
other, and loud about what it cannot identify."""

from __future__ import annotations

import copy
import hashlib
import json
import subprocess
import sys
from enum import StrEnum

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nw import plans
from nw.plans import NonCanonicalPlan, PlanError, plan_hash
from tests import helpers

json_values = helpers.json_values()


def call(**over):
    base = {
        "tool": "generate_image",
        "application": "fal-ai/flux/dev",
        "arguments": {"prompt": "a tiger", "seed": 7, "strength": 0.5},
        "output_kind": "image",
    }
    return {**base, **over}


def plan(*calls):
    """A plan in falaw's shape: its identity is ``falaw.plan_hash``'s."""
    return {"calls": list(calls) or [call()]}


def neutral(*calls):
    """A plan with a field falaw does not know: nw's vendor-neutral identity."""
    return {"calls": list(calls) or [call()], "planner": "tests"}


def reordered(value):
    """The same value with every mapping's keys in reverse order."""
    if isinstance(value, dict):
        return {k: reordered(v) for k, v in reversed(list(value.items()))}
    if isinstance(value, list):
        return [reordered(v) for v in value]
    return value


def floats_for_integers(value):
    """The same value with every int written as an equal float where exact."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) < 2**53:
        return float(value)
    if isinstance(value, dict):
        return {k: floats_for_integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [floats_for_integers(v) for v in value]
    return value


# ----- canonical form ------------------------------------------------------------


@given(st.dictionaries(st.text(), json_values, max_size=6))
def test_key_order_and_number_spelling_never_move_a_neutral_hash(arguments):
    given_plan = neutral(call(arguments=arguments))
    assert plan_hash(given_plan) == plan_hash(reordered(given_plan))
    assert plan_hash(given_plan) == plan_hash(floats_for_integers(given_plan))


@given(st.dictionaries(st.text(), json_values, max_size=6))
def test_a_json_round_trip_keeps_the_hash(arguments):
    for given_plan in (plan(call(arguments=arguments)), neutral(call(arguments=arguments))):
        assert plan_hash(json.loads(json.dumps(given_plan))) == plan_hash(given_plan)


@pytest.mark.parametrize(
    ("a", "b"),
    [(1, 1.0), (0, -0.0), (2**60, float(2**60)), (1e300, int(1e300)), ([1, 2], (1, 2))],
)
def test_equal_numbers_in_different_forms_are_one_neutral_identity(a, b):
    assert plan_hash(neutral(call(arguments={"n": a}))) == plan_hash(
        neutral(call(arguments={"n": b}))
    )


@pytest.mark.parametrize(("a", "b"), [(1, 1.0), (0, -0.0)])
def test_in_a_falaw_plan_numbers_are_as_falaw_writes_them(a, b):
    # falaw hashes json.dumps of the arguments as given, so 1 and 1.0 differ there
    assert plan_hash(plan(call(arguments={"n": a}))) != plan_hash(plan(call(arguments={"n": b})))


@pytest.mark.parametrize(
    ("a", "b"),
    [(1, True), (0, False), (1, "1"), (1.5, 1.5000000001), (0, None), (2**53 + 1, 2**53)],
)
def test_different_values_are_different_identities(a, b):
    for form in (plan, neutral):
        assert plan_hash(form(call(arguments={"n": a}))) != plan_hash(
            form(call(arguments={"n": b}))
        )


def test_a_str_enum_is_its_string():
    class Size(StrEnum):
        SQUARE = "square"

    for form in (plan, neutral):
        assert plan_hash(form(call(arguments={"size": Size.SQUARE}))) == plan_hash(
            form(call(arguments={"size": "square"}))
        )


def test_the_hashes_are_pinned_so_the_canonical_forms_cannot_drift_silently():
    # Given a fixed plan, when it is hashed, then the digest is exactly this one:
    # a change here moves every stored job's identity and must be deliberate.
    arguments = {"prompt": "a tiger", "n": 1.0, "ratio": 0.5, "é": [True, None]}
    fixed = neutral(call(arguments=arguments))
    text = (
        '{"calls":[{"application":"fal-ai/flux/dev","arguments":{"n":1,"prompt":"a tiger",'
        '"ratio":0.5,"é":[true,null]},"output_kind":"image","tool":"generate_image"}],'
        '"planner":"tests"}'
    )
    assert plans.plan_identity_json(fixed) == text
    assert plan_hash(fixed) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    # The same calls in falaw's shape: falaw's text, ASCII, spaced, 1.0 kept.
    falaw_text = (
        '[{"app": "fal-ai/flux/dev", "args": {"n": 1.0, "prompt": "a tiger", '
        '"ratio": 0.5, "\\u00e9": [true, null]}, "tool": "generate_image"}]'
    )
    assert plans.plan_identity_json(plan(call(arguments=arguments))) == falaw_text
    assert plan_hash(plan(call(arguments=arguments))) == (
        hashlib.sha256(falaw_text.encode()).hexdigest()
    )


# ----- what identifies a plan and what only describes it -------------------------


@pytest.mark.parametrize(
    "described",
    [
        {"estimated_cost_usd": 0.025},
        {"estimated_cost_usd": None},
        {"cost_basis": {"pricer": "rate_table", "priced": "m", "quantities": {"images": 1}}},
        {"cache_status": "hit"},
        {"metadata": {"shot_id": "s1"}},
        {"expected_duration_s": [2, 10]},
        {"backend": "fal"},
        {"key_extra": {}},
        {"local_files": []},
    ],
)
def test_cost_and_descriptive_fields_do_not_move_the_hash(described):
    assert plan_hash(plan(call(**described))) == plan_hash(plan(call()))
    assert plan_hash(neutral(call(**described))) == plan_hash(neutral(call()))


def test_repricing_a_plan_never_moves_its_identity():
    before = plan(call(estimated_cost_usd=0.01, cost_basis={"pricer": "x", "priced": "m"}))
    after = copy.deepcopy(before)
    after["calls"][0]["estimated_cost_usd"] = 0.1
    after["calls"][0]["cost_basis"]["table_version"] = "new"
    after["schema"] = plans.FALAW_PLAN_SCHEMA
    assert plan_hash(before) == plan_hash(after)


@pytest.mark.parametrize(
    "changed",
    [
        {"tool": "edit_image"},
        {"application": "fal-ai/flux/schnell"},
        {"output_kind": "video"},
        {"arguments": {"prompt": "a tiger", "seed": 8, "strength": 0.5}},
        {"arguments": {"prompt": "a tiger", "seed": 7}},
        {"backend": "comfyui"},
        {"key_extra": {"impl_version": 2}},
        {"local_files": [["image_url"]]},
        {"an_unknown_field": 1},
    ],
)
def test_structural_changes_move_a_neutral_hash(changed):
    assert plan_hash(neutral(call(**changed))) != plan_hash(neutral(call()))


@pytest.mark.parametrize(
    "changed",
    [
        {"tool": "edit_image"},
        {"application": "fal-ai/flux/schnell"},
        {"arguments": {"prompt": "a tiger", "seed": 8, "strength": 0.5}},
        {"backend": "comfyui"},
        {"key_extra": {"impl_version": 2}},
    ],
)
def test_what_falaw_hashes_moves_a_falaw_hash(changed):
    assert plan_hash(plan(call(**changed))) != plan_hash(plan(call()))


@pytest.mark.parametrize("unhashed", [{"output_kind": "video"}, {"local_files": [["x"]]}])
def test_what_falaw_does_not_hash_does_not_move_a_falaw_hash(unhashed):
    assert plan_hash(plan(call(**unhashed))) == plan_hash(plan(call()))


def test_a_field_falaw_does_not_know_makes_a_plan_neutral():
    assert plans.is_falaw_form(plan()) and not plans.is_falaw_form(neutral())
    assert not plans.is_falaw_form(plan(call(an_unknown_field=1)))
    assert plan_hash(plan(call(an_unknown_field=1))) != plan_hash(plan(call()))


def test_call_order_and_count_are_identity():
    a, b = call(), call(tool="image_to_video", output_kind="video")
    for form in (plan, neutral):
        assert plan_hash(form(a, b)) != plan_hash(form(b, a))
        assert plan_hash(form(a)) != plan_hash(form(a, a))


# ----- refusal -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        ({1, 2}, "set"),
        (b"bytes", "bytes"),
        (object(), "object"),
        ({1: "int key"}, "non-string key"),
    ],
)
def test_a_value_without_a_canonical_form_is_refused_naming_where(value, named):
    for form in (plan, neutral):
        bad = form(call(arguments={"ok": 1, "deep": {"list": [0, value]}}))
        with pytest.raises(NonCanonicalPlan, match=named) as err:
            plan_hash(bad)
        assert err.value.path.startswith("plan.calls[0].arguments.deep.list[1]")
        assert isinstance(err.value, PlanError) and isinstance(err.value, TypeError)


@pytest.mark.parametrize(
    "bad",
    [
        "a plan",
        None,
        {},
        {"calls": "x"},
        {"calls": [1]},
        {"calls": [{"tool": "t", "application": "m", "output_kind": "image"}]},
        {"calls": [call(tool="")]},
        {"calls": [call(application=None)]},
        {"calls": [call(arguments=[1])]},
        {"schema": "falaw.plan/v9", "calls": []},
    ],
)
def test_a_value_that_is_not_a_plan_is_a_plan_error(bad):
    with pytest.raises(PlanError):
        plan_hash(bad)


def test_an_empty_plan_is_a_plan():
    assert plan_hash({"calls": []}) == plan_hash({"calls": ()})


def test_importing_nw_does_not_import_falaw():
    code = "import sys, nw.jobs, nw.plans, nw.pricing; sys.exit('falaw' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# ----- falaw interop (skips cleanly without the fal extra) -----------------------


@pytest.fixture
def falaw():
    return pytest.importorskip("falaw")


def falaw_plan(falaw):
    first = falaw.CallPlan(
        tool="generate_image",
        application="fal-ai/flux/dev",
        arguments={"prompt": "a tiger", "num_images": 2, "size": (1024, 768)},
        output_kind="image",
        estimated_cost_usd=0.05,
        metadata={"shot_id": "s1"},
        cost_basis=falaw.CostBasis(pricer="model_catalogue", priced="fal-ai/flux/dev"),
    )
    second = falaw.CallPlan(
        tool="image_to_video",
        application="fal-ai/kling-video/v2.1/standard/image-to-video",
        arguments={"image_url": "<from 0>", "duration": 5.0},
        output_kind="video",
    )
    return falaw.Plan(calls=(first, second))


def test_a_falaw_plan_hashes_the_same_as_its_dict_forms(falaw):
    live = falaw_plan(falaw)
    as_dict = falaw.plan_to_dict(live)
    stored = json.loads(json.dumps(as_dict))
    handwritten = {
        "calls": [
            {
                "tool": "generate_image",
                "application": "fal-ai/flux/dev",
                "arguments": {"prompt": "a tiger", "num_images": 2, "size": [1024, 768]},
                "output_kind": "image",
            },
            {
                "tool": "image_to_video",
                "application": "fal-ai/kling-video/v2.1/standard/image-to-video",
                "arguments": {"image_url": "<from 0>", "duration": 5.0},
                "output_kind": "video",
            },
        ]
    }
    assert plan_hash(live) == plan_hash(as_dict) == plan_hash(stored) == plan_hash(handwritten)
    assert plan_hash(live) == falaw.plan_hash(live)
    assert plans.as_plan_dict(live) == as_dict


def test_a_falaw_cost_basis_and_price_do_not_move_the_hash(falaw):
    live = falaw_plan(falaw)
    stripped = falaw.Plan(
        calls=tuple(
            falaw.CallPlan(
                tool=c.tool,
                application=c.application,
                arguments=c.arguments,
                output_kind=c.output_kind,
            )
            for c in live.calls
        )
    )
    assert plan_hash(live) == plan_hash(stripped)
    other = live.with_call_replaced(
        1,
        falaw.CallPlan(
            tool="image_to_video",
            application="fal-ai/kling-video/v2.1/standard/image-to-video",
            arguments={"image_url": "<from 0>", "duration": 10},
            output_kind="video",
        ),
    )
    assert plan_hash(other) != plan_hash(live)


# ----- byte-for-byte falaw.plan_hash (property tests against the installed falaw) --

placeholders = st.integers(min_value=0, max_value=9).map(lambda n: f"<from {n}>")
argument_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | placeholders,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(), inner, max_size=3)
    ),
    max_leaves=10,
)
names = st.text(min_size=1, max_size=12)
arguments = st.dictionaries(st.text(max_size=8), argument_values, max_size=5)


@st.composite
def falaw_calls(draw, falaw):
    return falaw.CallPlan(
        tool=draw(names),
        application=draw(names),
        backend=draw(st.sampled_from(["fal", "comfyui"]) | names),
        arguments=draw(arguments),
        output_kind=draw(st.sampled_from(["image", "video", "audio"])),
        estimated_cost_usd=draw(st.none() | st.floats(min_value=0, max_value=10)),
        cache_status=draw(st.sampled_from(["unknown", "hit", "miss"])),
        metadata=draw(st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2)),
        key_extra=draw(st.dictionaries(st.text(max_size=5), argument_values, max_size=2)),
    )


@given(data=st.data())
def test_every_plan_falaw_hashes_hashes_the_same_in_nw(data):
    falaw = pytest.importorskip("falaw")
    live = falaw.Plan(calls=tuple(data.draw(st.lists(falaw_calls(falaw), max_size=4))))
    expected = falaw.plan_hash(live)
    as_dict = falaw.plan_to_dict(live)
    stored = json.loads(json.dumps(as_dict))
    assert plan_hash(live) == expected
    assert plan_hash(as_dict) == expected
    assert plan_hash(stored) == falaw.plan_hash(falaw.plan_from_dict(stored)) == expected


bad_values = st.sampled_from(
    [float("nan"), float("inf"), -float("inf"), {1, 2}, b"x", object(), {1: "a"}]
) | st.just("ok")


@given(value=bad_values, nested=st.booleans())
def test_nw_refuses_exactly_what_falaw_refuses(value, nested):
    falaw = pytest.importorskip("falaw")
    from types import MappingProxyType

    args = {"x": [0, {"deep": value}]} if nested else {"x": value}
    for given_args in (args, {"x": MappingProxyType({"y": value})}):
        live = falaw.Plan(
            calls=(
                falaw.CallPlan(
                    tool="t", application="m", arguments=given_args, output_kind="image"
                ),
            )
        )
        try:
            expected = falaw.plan_hash(live)
        except falaw.FalNonCanonicalArgument:
            expected = None
        if expected is None:
            with pytest.raises(NonCanonicalPlan):
                plan_hash(live)
        else:
            assert plan_hash(live) == expected


def test_the_falaw_fields_nw_knows_are_falaws(falaw):
    import dataclasses

    assert {f.name for f in dataclasses.fields(falaw.CallPlan)} == plans.FALAW_CALL_FIELDS
    assert set(falaw.plan_to_dict(falaw.Plan(calls=()))) == plans.FALAW_PLAN_FIELDS
