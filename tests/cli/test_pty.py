"""On a real terminal (a pty), ``nw-jobs list``, ``show`` and ``watch`` show job
data as text: no escape sequence, bell, C1 control or bidirectional override
from a label, an actor, params or an error reaches the terminal raw, markup
and emoji codes read as typed, and every command exits 0.

The rows are written into the store file directly, past the input checks, as
rows stored before those checks existed would be."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import sqlite3
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from nw import jobs
from nw.jobs.execution.runtimes import shutdown_runtimes
from nw.jobs.stores import close_shared_stores
from tests.helpers import wait_until

pytestmark = pytest.mark.slow

HOSTILE = {
    "title": "\x1b]0;PWNED-TITLE\x07",
    "clear": "wipe \x1b[2J\x1b[H",
    "link": "\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "clipboard": "\x1b]52;c;cHduZWQ=\x07",
    "markup": "[bold]loud[/bold]",
    "emoji": "hot :fire: take",
    "bad markup": "render [/nope] panel",
    "c1 csi": "eight-bit \x9b31m red",
    "bidi": "txt.exe\u202egnp.",
    "surrogate": "bad \ud800 label",
    "nul": "nul \x00 here",
}
SHOWN = {  # what the terminal shows instead (a fragment of it)
    "title": b"\\x1b]0;PWNED-TITLE\\x07",
    "clear": b"wipe \\x1b[2J\\x1b[H",
    "link": b"\\x1b]8;;http://evil.example/\\x1b\\click",
    "clipboard": b"\\x1b]52;c;cHduZWQ=\\x07",
    "markup": b"[bold]loud[/bold]",
    "emoji": b"hot :fire: take",
    "bad markup": b"render [/nope] panel",
    "c1 csi": b"eight-bit \\x9b31m red",
    "bidi": b"txt.exe\\u202egnp.",
    "surrogate": b"bad \\ud800 label",
    "nul": b"nul \\x00 here",
}
ERROR = "boom \x1b]0;FROM-THE-ERROR\x07 \x1b[6n asks the terminal"


def ok_body(project, params):
    return {"ok": True}


def failing_body(project, params):
    raise RuntimeError(ERROR)


def nw_jobs() -> list[str]:
    script = Path(sys.executable).with_name("nw-jobs")
    return [str(script)] if script.exists() else [sys.executable, "-m", "nw.cli"]


def run_in_pty(args: list[str], cwd: Path, *, timeout: float = 60.0) -> tuple[int, bytes]:
    """Run ``nw-jobs ARGS`` with a pty (200 x 50) as its terminal: (exit status, bytes written)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "50"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [*nw_jobs(), *args], stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env
    )
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"nw-jobs {args} still running: {chunks}"
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the command closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        return proc.wait(timeout=timeout), b"".join(chunks)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


RICH_CSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")
"""What rich itself writes on a terminal: colours and styles, cursor moves (CSI)."""


def assert_nothing_raw_from_data(out: bytes) -> None:
    assert b"\x07" not in out, "a BEL reached the terminal"
    assert b"\x1b]" not in out, "an OSC sequence (title, link, clipboard) reached the terminal"
    assert b"\x1b[2J" not in out and b"\x1b[6n" not in out, "the data's CSI reached it"
    assert "\x9b".encode() not in out, "a C1 control reached the terminal"
    assert "\u202e".encode() not in out, "a bidirectional override reached the terminal"
    assert b"\x00" not in out
    assert "🔥".encode() not in out, ":fire: became an emoji"
    left = RICH_CSI.sub(b"", out)
    assert b"\x1b" not in left, left[max(left.index(b"\x1b") - 40, 0) :][:80]


@pytest.fixture
def hostile_project(project):
    """A project whose stored rows carry ``HOSTILE`` in their label, kind, actor and
    params (written into the file directly), and one that failed with ``ERROR``."""
    made = {}
    for name in HOSTILE:
        job = jobs.enqueue(project, "ok", {"case": name}, dispatch={"ok": ok_body})
        made[name] = job.job_id
    failed = jobs.enqueue(project, "fails", {}, dispatch={"fails": failing_body})
    for job_id in [*made.values(), failed.job_id]:
        wait_until(
            lambda job_id=job_id: jobs.get_job(project, job_id).is_terminal,
            what=f"job {job_id[:8]} to finish",
        )
    shutdown_runtimes(wait=True)
    close_shared_stores()
    path = Path(project.root) / ".nw/jobs/jobs.sqlite3"
    with sqlite3.connect(path) as conn:
        for name, job_id in made.items():
            text = HOSTILE[name]
            (doc,) = conn.execute("SELECT doc FROM jobs WHERE job_id = ?", (job_id,)).fetchone()
            record = json.loads(doc)
            record["label"] = text
            record["actor"] = {"id": f"actor {text}", "handle": text}
            record["params"] = {"case": name, f"key {text}": text}
            conn.execute(
                "UPDATE jobs SET doc = ?, kind = ? WHERE job_id = ?",
                (json.dumps(record), json.dumps(f"kind {text}")[1:-1], job_id),
            )
    return project, made, failed.job_id


def test_list_shows_hostile_rows_as_text_and_exits_0(hostile_project):
    project, made, _ = hostile_project
    status, out = run_in_pty(["list"], project.root)
    assert status == 0, out
    assert_nothing_raw_from_data(out)
    for name in made:  # each row is there, its label shown by its escapes
        assert SHOWN[name][:12] in out, (name, out)
    assert b"\\x1b]0;FROM-THE-ERROR" in out  # the failed job's note (it may wrap at a space)


@pytest.mark.parametrize("name", list(HOSTILE))
def test_show_shows_a_hostile_job_as_text_and_exits_0(hostile_project, name):
    project, made, _ = hostile_project
    status, out = run_in_pty(["show", made[name][:12]], project.root)
    assert status == 0, out
    assert_nothing_raw_from_data(out)
    plain = RICH_CSI.sub(b"", out)
    assert re.search(rb"\nlabel +" + re.escape(SHOWN[name]), plain), plain  # the label row


def test_show_shows_a_hostile_error_as_text(hostile_project):
    project, _, failed = hostile_project
    status, out = run_in_pty(["show", failed[:12]], project.root)
    assert status == 0, out
    assert_nothing_raw_from_data(out)
    assert b"boom \\x1b]0;FROM-THE-ERROR\\x07 \\x1b[6n asks" in out


@pytest.mark.parametrize("name", ["title", "bad markup", "surrogate"])
def test_watch_shows_a_hostile_job_live_and_exits_0(hostile_project, name):
    project, made, _ = hostile_project
    status, out = run_in_pty(["watch", made[name][:12], "--interval", "0.1"], project.root)
    assert status == 0, out
    assert b"\x1b[?25l" in out, "not the live view: the pty was not taken for a terminal"
    assert_nothing_raw_from_data(out)
    assert SHOWN[name] in out


def test_list_json_and_a_pipe_carry_no_raw_control_either(hostile_project):
    project, made, _ = hostile_project
    piped = subprocess.run(
        [*nw_jobs(), "list", "--json"], cwd=project.root, capture_output=True, timeout=60
    )
    assert piped.returncode == 0, piped.stderr
    assert_nothing_raw_from_data(piped.stdout)
    labels = {job["label"] for job in json.loads(piped.stdout)}
    assert set(HOSTILE.values()) <= labels  # the JSON says exactly what is stored
    watched = subprocess.run(
        [*nw_jobs(), "watch", made["title"][:12]],
        cwd=project.root,
        capture_output=True,
        timeout=60,
    )
    assert watched.returncode == 0, watched.stderr
    assert_nothing_raw_from_data(watched.stdout)
    assert SHOWN["title"] in watched.stdout


def test_a_pty_is_needed_to_see_this(tmp_path):
    """The harness itself: a raw ESC written by a command does reach the bytes read."""
    if shutil.which("printf") is None:
        pytest.skip("no printf")
    master, slave = os.openpty()
    subprocess.run(["printf", r"\033]0;x\007"], stdout=slave, check=True)
    os.close(slave)
    assert os.read(master, 100) == b"\x1b]0;x\x07"
    os.close(master)


@pytest.mark.parametrize("name", ["bad markup", "title"])
def test_cancel_of_a_hostile_job_exits_0(hostile_project, name):
    project, made, _ = hostile_project
    status, out = run_in_pty(["cancel", made[name][:12]], project.root)
    assert status == 0, out
    assert_nothing_raw_from_data(out)
    assert b"already finished" in out and SHOWN[name] in out
