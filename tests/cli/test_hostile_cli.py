"""Hostile input on the command line: one error line naming the field and the
problem (never the raw character), exit 1, and nothing written."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.cli.test_cli import nw_jobs, one_line_error

pytestmark = pytest.mark.slow

WHERE = ("--import", "tests.fixtures.bodies")


def nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def stored_jobs(project) -> int:
    path = Path(project.root) / ".nw/jobs/jobs.sqlite3"
    if not path.exists():
        return 0
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT count(*) FROM jobs").fetchone()[0]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["t.noop", "--label", "\x1b]0;TITLE\x07"], "label has a control character U+001B at 0"),
        (["t.noop", "--label", "x" * 120_000], "label is 120000 characters long; the limit is"),
        (["t.noop", "--params", '{"a": "\\u0000"}'], "params.a has a NUL character"),
        (["t.noop", "--params", '{"a": ["\\ud800"]}'], "params.a[0] has a lone surrogate"),
        (["t.noop", "--params", '{"k\\u001b[2J": 1}'], "the params key at params['k\\x1b[2J']"),
        (["t.noop", "--params", json.dumps(nested(500))], "params are nested deeper than 32"),
        (["\x1b[2Jt.noop"], "kind has a control character U+001B"),
    ],
    ids=["label ESC", "huge label", "NUL", "surrogate", "key ESC", "500 deep", "kind ESC"],
)
def test_enqueue_says_one_line_and_writes_nothing(project, args, said):
    ran = nw_jobs("enqueue", *args, *WHERE, "--project", str(project.root))
    one_line_error(ran, said)
    assert "\x1b" not in ran.stderr and "\x07" not in ran.stderr
    assert stored_jobs(project) == 0


def test_a_batch_with_one_hostile_item_writes_nothing(project, tmp_path):
    batch = tmp_path / "batch.json"
    batch.write_text(
        json.dumps(
            [
                {"kind": "t.noop", "params": {"i": 0}},
                {"kind": "t.noop", "params": {"i": 1}, "actor": {"id": "a", "handle": "\ud800"}},
            ]
        )
    )
    ran = nw_jobs("enqueue", "--batch", str(batch), *WHERE, "--project", str(project.root))
    one_line_error(ran, "item 1: actor handle has a lone surrogate")
    assert stored_jobs(project) == 0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--kind", "k\x1b]0;T\x07"], "kind has a control character"),
        (["--actor", "a\x1b[31m"], "actor has a control character"),
        (["--search", "\x1b[2J"], "q has a control character"),
    ],
)
def test_list_filters_say_one_line(project, args, said):
    ok = nw_jobs("enqueue", "t.noop", *WHERE, "--project", str(project.root))
    assert ok.returncode == 0, ok.stderr
    ran = nw_jobs("list", *args, "--project", str(project.root))
    one_line_error(ran, said)
    assert "\x1b" not in ran.stderr
