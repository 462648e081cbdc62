"""Test helpers: poll with a deadline, never sleep as an assertion."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T], *, timeout: float = 10.0, every: float = 0.01, what: str = ""
) -> T:
    """The first truthy value of ``probe()``; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or probe}: last={last!r}")


def pipeline_ended(project, cfg, pipeline_id: str, timeout: float = 30.0):
    """The pipeline once it has ended (every step finished); fails the test after ``timeout``."""
    from nw import jobs

    return wait_until(
        lambda: (p := jobs.get_pipeline(project, pipeline_id, config=cfg)) and p.is_terminal and p,
        timeout=timeout,
        what=f"pipeline {pipeline_id} to end",
    )


REPO = str(Path(__file__).resolve().parents[1])


def strict_skips() -> bool:
    """Under ``NW_REQUIRE_POSTGRES=1`` or ``NW_REQUIRE_BROWSER=1`` no test may be skipped."""
    return "1" in (os.environ.get("NW_REQUIRE_POSTGRES"), os.environ.get("NW_REQUIRE_BROWSER"))


#: Headless Debian chromium, as this machine allows it (no background networking).
HEADLESS_CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@contextmanager
def python_process(
    script: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()
) -> Iterator[subprocess.Popen]:
    """Run ``script`` (dedented; ``args`` its ``sys.argv[1:]``) in a new
    interpreter with the repo importable; it is killed with SIGKILL when the
    block ends: the crash under test."""
    proc = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO, **(env or {})},
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def json_values():
    """Hypothesis: any JSON value (no NaN/inf), nested a little."""
    from hypothesis import strategies as st

    return st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
        max_leaves=12,
    )
