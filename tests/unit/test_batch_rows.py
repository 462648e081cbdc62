"""How a batch of new jobs is sent to PostgreSQL (``pg_batch``) and how a
``Job`` is made from its fields (``records._job``): pure parts, no database."""

from __future__ import annotations

import dataclasses

import pytest

from nw.jobs.core.model import QUEUED, Job
from nw.jobs.core.records import _job
from nw.jobs.stores.columns import row_values
from nw.jobs.stores.pg_batch import batch_rows, shared_fields


def test_a_field_is_shared_only_when_every_row_would_store_it_alike():
    same = {"a": 1}
    docs = [
        {"label": "x", "one": 1, "zero": 0.0, "plan": same, "own": {"i": 0}, "some": 1},
        {"label": "x", "one": True, "zero": -0.0, "plan": same, "own": {"i": 0}},
        {"label": "x", "one": 1, "zero": 0.0, "plan": same, "own": {"i": 0}, "some": 1},
    ]
    # 1 == True and 0.0 == -0.0, but their JSON differs; equal dicts that are not
    # the same object are each row's own; a field one row lacks is not shared
    assert shared_fields(docs) == {"label": "x", "plan": same}
    assert shared_fields(docs[:1]) == {}  # a batch of one sends its document whole


def test_a_batch_row_is_its_columns_and_its_own_fields_beside_the_shared_ones():
    def record(i, label):
        return {
            "job_id": f"{i:064x}",
            "kind": "k",
            "created_at": 10.0 + i,
            "label": label,
            "params": {"i": i},
            "not_before": 30.0,
            "priority": 2,
        }

    records = [record(0, "a"), record(1, "a"), record(2, "b")]
    rows, shared = batch_rows(records, [False, True, True], [2, 0])
    assert shared == {"not_before": 30.0, "priority": 2}  # the label differs between them
    assert [r["job_id"] for r in rows] == [f"{2:064x}", f"{0:064x}"]
    assert [r["n"] for r in rows] == [2, 0]  # each row's place in the batch
    assert [r["queue_at"] for r in rows] == [30.0, None]  # claimable, due at its not_before
    assert rows[0]["priority"] == 2 and rows[0]["doc"] == {"label": "b", "params": {"i": 2}}
    for row, k in zip(rows, [2, 0], strict=True):  # shared || own is the whole document
        assert {**shared, **row["doc"]} == row_values(records[k])[1]


def test_a_job_made_from_its_fields_is_the_one_its_init_makes():
    fields = {f.name: None for f in dataclasses.fields(Job)}
    fields.update(
        job_id="j",
        kind="k",
        label="l",
        status=QUEUED,
        idempotency_key="i",
        params={"a": 1},
        attempt=0,
        max_attempts=1,
        priority=0,
        cached=False,
        attempts=[],
    )
    made = _job(**fields)
    assert made == Job(**fields) and vars(made) == vars(Job(**fields))
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.label = "other"  # type: ignore[misc]
    # a field left to its default takes the long way, and gets the default
    del fields["attempts"]
    assert _job(**fields).attempts == []
