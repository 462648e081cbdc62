"""The worker's own log line looks up no thread, process or caller, and gives
those lookups back when a module it imports sets up logging of its own."""

from __future__ import annotations

import subprocess
import sys


def _run(setup: str) -> str:
    """stderr of a process that starts the worker's log as ``serve`` does, runs
    ``setup`` (what an --import module does) and logs one record."""
    code = "\n".join(
        [
            "import logging, sys",
            "from nw.jobs.execution import worker_cli",
            'ours = worker_cli._log_to_stderr("INFO")',
            setup,
            "worker_cli._lookups_for_others(ours)",
            'logging.getLogger("app").info("hello")',
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return out.stderr


def test_a_module_with_its_own_handler_gets_thread_and_caller() -> None:
    setup = (
        "h = logging.StreamHandler(sys.stderr);"
        " h.setFormatter(logging.Formatter('APP %(threadName)s %(process)d %(funcName)s'));"
        " logging.getLogger('app').addHandler(h)"
    )
    lines = [line for line in _run(setup).splitlines() if line.startswith("APP ")]
    assert len(lines) == 1
    _, thread, pid, func = lines[0].split()
    assert thread == "MainThread" and pid.isdigit() and func == "<module>"


def test_the_worker_alone_skips_the_lookups() -> None:
    setup = "logging.getLogger('lib').addHandler(logging.NullHandler())"
    check = "assert not logging.logThreads and logging._srcfile is None"
    out = _run(f"{setup}\n{check}\nworker_cli._lookups_for_others(ours)\n{check}")
    assert out.rstrip().endswith("app hello")
