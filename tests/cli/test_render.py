"""How a job reads: the cost's honesty flag, the ETA's confidence, the stage (pure)."""

from __future__ import annotations

import io

import pytest

from nw.cli.render import (
    cost_text,
    eta_text,
    jobs_table,
    plain_line,
    stage_text,
    state_text,
)

COST_CASES = [
    # (cost, cached, shown)
    ({"actual_usd": 0.5, "actual_is_lower_bound": False}, False, "$0.50"),
    ({"actual_usd": 0.5, "actual_is_lower_bound": True}, False, "≥ $0.50"),
    ({"actual_usd": 0.0, "actual_is_lower_bound": True}, False, "unknown"),
    ({"actual_usd": None, "actual_is_lower_bound": True}, False, "unknown"),
    ({"actual_usd": 0.0, "actual_is_lower_bound": False}, True, "$0.00 cached"),
    ({"estimated_usd": 0.35}, False, "est. $0.35"),
    ({"estimated_usd": None}, False, "unknown"),
    ({"actual_usd": 0.004, "actual_is_lower_bound": None}, False, "$0.004"),
]


@pytest.mark.parametrize("cost, cached, shown", COST_CASES)
def test_cost_carries_its_honesty_flag(cost, cached, shown):
    assert cost_text({"cost": cost, "cached": cached}) == shown


def test_an_unknown_cost_never_reads_as_zero():
    for cost, cached, _ in COST_CASES:
        text = cost_text({"cost": cost, "cached": cached})
        if cost.get("actual_is_lower_bound") or cost.get("estimated_usd", 0) is None:
            assert not text.startswith("$0"), text


@pytest.mark.parametrize(
    "job, shown",
    [
        ({"status": "running", "confidence": "prior", "eta_s": 10}, "estimating…"),
        ({"status": "running", "confidence": "learned", "eta_s": 3.2}, "~3.2s left (learned)"),
        ({"status": "queued", "confidence": "learned", "eta_s": 12}, "~12s once running (learned)"),
        (
            {
                "status": "running",
                "confidence": "learned",
                "eta_s": 0,
                "label_hint": "taking longer than usual",
            },
            "taking longer than usual (learned)",
        ),
        ({"status": "succeeded", "elapsed_s": 75}, "took 1m15s"),
        ({"status": "failed", "elapsed_s": None}, "—"),
    ],
)
def test_eta_says_how_much_to_trust_it(job, shown):
    assert eta_text(job) == shown


def test_stage_and_plain_line():
    job = {
        "job_id": "a" * 64,
        "kind": "panel.render",
        "label": "Panel 1",
        "status": "running",
        "pct": 33.3,
        "confidence": "observed",
        "eta_s": 2,
        "progress": {"stage_index": 1, "stage_count": 3, "current_transform": "render"},
        "cost": {"actual_usd": 0.1, "actual_is_lower_bound": True},
    }
    assert stage_text(job) == "render · 1 of 3 done"
    assert plain_line(job) == (
        "aaaaaaaaaaaa | Panel 1 | running | 33% | ~2.0s left (observed)"
        " | stage render · 1 of 3 done | cost ≥ $0.10"
    )


def test_a_waiting_job_says_what_holds_it():
    job = {
        "job_id": "c" * 64,
        "kind": "k",
        "label": "Clip",
        "status": "queued",
        "waiting": "waiting: fal:kling at 2 of 2",
        "confidence": "learned",
        "eta_s": 95,
        "starts_at": "2026-12-01T08:00:00+00:00",
        "progress": {},
        "cost": {},
    }
    assert plain_line(job).startswith(
        "cccccccccccc | Clip | waiting: fal:kling at 2 of 2 | — | ~1m35s to done (learned)"
    )
    assert state_text({**job, "waiting": None}) == "queued"
    assert state_text({**job, "status": "running"}) == "running"


@pytest.mark.parametrize("width", [60, 80, 100, 160])
def test_the_table_fits_the_terminal(width):
    from rich.console import Console

    job = {
        "job_id": "b" * 64,
        "kind": "k",
        "label": "x" * 80,
        "status": "failed",
        "error": "e" * 200,
        "grade": "error",
        "cost": {},
        "progress": {},
    }
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(jobs_table([job], width=width))
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= width
    assert "failed" in text
    if width >= 80:  # the cost survives on an ordinary terminal, and reads honestly
        assert "unknown" in text


def test_at_80_columns_why_a_job_waits_and_why_it_ended_are_shown_whole():
    from rich.console import Console

    from nw.cli.render import jobs_table

    waiting = {
        "job_id": "a" * 64, "kind": "clip.animate", "label": "Animate panel 2 of the board",
        "status": "queued", "waiting": "waiting: fal:kling at 2 of 2", "eta_s": None,
        "confidence": "prior", "cost": {},
    }  # fmt: skip
    failed = {
        "job_id": "b" * 64, "kind": "narrate", "label": "Narration", "status": "failed",
        "grade": "error", "error": "RuntimeError: the voice model refused", "cost": {},
        "error_kind": "crashed",
    }  # fmt: skip
    console = Console(width=80, record=True, color_system=None)
    console.print(jobs_table([waiting, failed], width=80))
    shown = console.export_text()
    words = set(shown.split())
    # why it waits is wrapped in its cell, not cut to "waiting: …"
    assert {"waiting:", "fal:kling", "2", "of"} <= words
    # no note column at 80: the status says why it ended
    assert {"voice", "model", "refused"} <= words
    assert "waiting: …" not in shown
