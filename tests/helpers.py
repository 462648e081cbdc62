"""Test helpers: poll with a deadline, never sleep as an assertion."""

from __future__ import annotations

import time
from collections.abc import Callable
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
