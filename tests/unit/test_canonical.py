"""nw.canonical: what counts as JSON, and each byte form's stated choices."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given

from nw import canonical
from nw.canonical import FALAW_FORM, ID_FORM, PLAN_FORM, NotJson
from tests import helpers

VALUE = {"b": 1.0, "a": ["é", -0.0, 0.5, None, True]}


def test_each_form_writes_its_stated_choices():
    assert ID_FORM.dumps(VALUE) == '{"a":["\\u00e9",0,0.5,null,true],"b":1}'
    assert PLAN_FORM.dumps(VALUE) == '{"a":["é",0,0.5,null,true],"b":1}'
    assert FALAW_FORM.dumps(VALUE) == '{"a": ["\\u00e9", -0.0, 0.5, null, true], "b": 1.0}'
    assert canonical.stored_json(VALUE) == '{"b":1.0,"a":["\\u00e9",-0.0,0.5,null,true]}'


@pytest.mark.parametrize(
    ("value", "where", "what"),
    [
        ({"x": [1, float("nan")]}, "v.x[1]", "nan"),
        ({"x": {"y": float("-inf")}}, "v.x.y", "-inf"),
        ({"x": {1: "a"}}, "v.x[1]", "non-string key"),
        ({"x": {1, 2}}, "v.x", "set"),
        ({"x": b"b"}, "v.x", "bytes"),
    ],
)
def test_every_hashed_form_refuses_what_is_not_json_naming_where(value, where, what):
    assert canonical.first_unjsonable(value, "v")[0] == where
    for form in (ID_FORM, PLAN_FORM, FALAW_FORM):
        with pytest.raises(NotJson, match=what) as err:
            form.dumps(value, "v")
        assert err.value.path == where and isinstance(err.value, TypeError)


def test_a_cycle_is_refused_not_a_recursion_error():
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(NotJson, match="circular"):
        PLAN_FORM.dumps(loop)
    shared = [1]
    assert canonical.is_json({"a": shared, "b": shared})  # a diamond is not a cycle


def test_only_the_falaw_form_refuses_a_mapping_that_is_not_a_dict():
    value = {"x": MappingProxyType({"y": 1})}
    assert PLAN_FORM.dumps(value) == '{"x":{"y":1}}'
    with pytest.raises(NotJson, match="not a dict"):
        FALAW_FORM.dumps(value)


def test_jsonable_keeps_json_and_writes_the_rest_as_its_repr():
    assert canonical.jsonable({"a": 1, "b": {2, 3}, "c": [float("nan")]}) == {
        "a": 1,
        "b": "{2, 3}",
        "c": "[nan]",
    }


@given(helpers.json_values())
def test_the_falaw_form_is_falaws_canonical_blob(value):
    falaw_canonical = pytest.importorskip("falaw.canonical")
    assert FALAW_FORM.dumps(value).encode() == falaw_canonical.canonical_blob(value)
