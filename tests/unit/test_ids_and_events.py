from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nw.jobs.core import events, ids
from tests import helpers

json_values = helpers.json_values()


@given(st.dictionaries(st.text(), json_values, max_size=6))
def test_params_hash_ignores_key_order_and_int_float_spelling(params):
    reordered = dict(reversed(list(params.items())))
    assert ids.params_hash(params) == ids.params_hash(reordered)
    assert ids.check_json_params(params) == params


def test_equal_numbers_hash_equal_and_different_values_do_not():
    assert ids.params_hash({"n": 2}) == ids.params_hash({"n": 2.0})
    assert ids.params_hash({"n": 2}) != ids.params_hash({"n": 2.5})


@given(st.text(min_size=1))
def test_job_ids_are_64_hex_and_validate(basis):
    job_id = ids.job_id_for("p", "k", basis)
    assert ids.check_job_id(job_id) == job_id


@pytest.mark.parametrize("bad", ["../x", "a" * 63, "g" * 64, "A" * 64, "a" * 65, None, 3])
def test_check_job_id_refuses(bad):
    with pytest.raises(ids.InvalidJobId):
        ids.check_job_id(bad)


def test_event_aliases_yield_to_canonical_names():
    patch = events.event_patch({}, {"index": 3, "stage_index": 2, "transform": "a"})
    assert patch["stage_index"] == 2 and patch["current_transform"] == "a"


def test_unknown_costs_are_sticky_and_none_until_reported():
    rec: dict = {}
    assert "actual_is_lower_bound" not in events.event_patch(rec, {"actual_usd": 1.0})
    rec |= events.event_patch(rec, {"has_unknown_costs": True})
    assert rec["actual_is_lower_bound"] is True
    rec |= events.event_patch(rec, {"has_unknown_costs": False})
    assert rec["actual_is_lower_bound"] is True
    assert events.result_patch(rec, {"has_unknown_costs": False})["actual_is_lower_bound"] is True
    assert events.result_patch({}, {"has_unknown_costs": False})["actual_is_lower_bound"] is False


def test_artifact_ids_and_provider_request_ids():
    assert events.artifact_of({"b_artifact_id": "2", "a_artifact_id": "1"}) == "1"
    assert events.artifact_of({"artifact_ref": "r", "a_artifact_id": "1"}) == "r"
    patch = events.event_patch({}, {"kind": "provider.submitted", "request_id": 77})
    assert patch["resume"] == {"request_id": "77"}


def test_progress_beats_only_for_progress_events():
    assert events.progress_beat({"kind": "cache_hit"}, 1.0) is None
    beat = events.progress_beat({"stage_index": 1, "stage_count": 4, "message": "m"}, 5.0)
    assert beat == {
        "ts": 5.0,
        "pct": 25.0,
        "message": "m",
        "stage": {"stage_index": 1, "stage_count": 4},
    }
