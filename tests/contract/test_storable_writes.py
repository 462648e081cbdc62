"""Every store write of what a body said follows one rule for text no store
keeps as given (NUL, lone surrogates -> U+FFFD; ``storable.py``), the same
on both stores, and a finish or requeue records it in ``text_replaced``."""

from __future__ import annotations

from au import ComputationStatus

from nw.jobs.core.storable import REPLACED_FIELD, REPLACEMENT
from tests.contract.test_store_contract import T0, queued

R = REPLACEMENT


def test_a_finish_keeps_its_result_and_error_with_the_rule_applied(store):
    (a, b) = queued(store, 2)
    store.claim(["render"], now=T0 + 1, runner_id="w", limit=2)
    assert store.finish(
        a,
        au_status=ComputationStatus.COMPLETED,
        result={"msg": "ok\x00tail", "k\ud800": ["x\udfffy"], "cost_usd_actual": 1.25},
        error=None,
        fields={"finished_at": T0 + 2, "actual_usd": 1.25},
        attempt=1,
    )
    row = store.get(a)
    assert row.status.value == "succeeded"
    assert row.result == {"msg": f"ok{R}tail", f"k{R}": [f"x{R}y"], "cost_usd_actual": 1.25}
    assert row.record[REPLACED_FIELD] == ["result"] and row.record["actual_usd"] == 1.25
    assert store.finish(
        b,
        au_status=ComputationStatus.FAILED,
        result=None,
        error="boom\x00 \udc80",
        fields={"finished_at": T0 + 2, "error": "boom\x00 \udc80", "error_kind": "crashed"},
        attempt=1,
    )
    row = store.get(b)
    assert row.status.value == "failed" and row.error == row.record["error"] == f"boom{R} {R}"
    assert row.record[REPLACED_FIELD] == ["error"]


def test_a_requeue_a_patch_and_a_progress_beat_follow_the_same_rule(store):
    (a,) = queued(store)
    store.claim(["render"], now=T0 + 1, runner_id="w")
    assert store.patch(a, {"current_transform": "t\x00", "stage": {"n\ud800": 1}}, attempt=1)
    assert store.append_progress(
        a, {"ts": T0 + 1, "pct": 5.0, "message": "m\x00", "stage": {"s": "\ud800"}}, attempt=1
    )
    beat = store.progress(a, limit=5)[-1]
    assert beat["message"] == f"m{R}" and beat["stage"] == {"s": R}
    assert store.requeue(
        a, fields={"error": "crash\x00", "error_kind": "crashed"}, not_before=T0 + 2, attempt=1
    )
    rec = store.get(a).record
    assert rec["current_transform"] == f"t{R}" and rec["stage"] == {f"n{R}": 1}
    assert rec["error"] == f"crash{R}" and rec[REPLACED_FIELD] == ["error"]
