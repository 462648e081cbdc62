"""One worker parser: ``nw-jobs worker`` and ``python -m nw.jobs.execution.worker`` read
the same flags into the same namespace, and the CLI hands it over as it is."""

from __future__ import annotations

import argparse
import sys
import types

import pytest

from nw import cli
from nw.cli.parser import build_parser
from nw.jobs.execution import worker, worker_cli

EVERY_FLAG = [
    "--project", "a", "--project", "b",
    "--import", "m.kinds", "--import", "m.more",
    "--max-concurrent", "2",
    "--database-url", "postgresql://h/db",
    "--secrets", "m.keys:provide",
    "--heartbeat-interval", "0.5",
    "--heartbeat-stale", "3",
    "--worker-beat-interval", "0.25",
    "--worker-stale", "2",
    "--shutdown-grace", "1.5",
    "--log-level", "debug",
]  # fmt: skip


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    (subs,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return subs.choices[name]


def _flags(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    """Each option string the parser declares -> its help."""
    return {opt: a.help for a in parser._actions for opt in a.option_strings}


def _own(ns: argparse.Namespace) -> dict:
    """The worker's part of a namespace (without the CLI's dispatch fields)."""
    return {k: v for k, v in vars(ns).items() if k not in ("command", "func", "version")}


@pytest.mark.parametrize("argv", [EVERY_FLAG, [], ["--project", "x", "--log-level", "WARNING"]])
def test_both_worker_entry_points_read_the_same_namespace(argv):
    via_cli = build_parser().parse_args(["worker", *argv])
    alone = worker_cli.build_parser().parse_args(argv)
    assert _own(via_cli) == vars(alone)
    assert via_cli.func is cli.ops.cmd_worker


def test_both_worker_entry_points_declare_the_same_flags_with_the_same_help():
    subcommand = _flags(_subcommand(build_parser(), "worker"))
    alone = _flags(worker_cli.build_parser())
    assert subcommand == alone
    assert all(help for opt, help in alone.items() if opt not in ("-h", "--help")), alone
    # every flag of the worker is one of them, and each reaches the namespace
    ns = vars(worker_cli.build_parser().parse_args(EVERY_FLAG))
    assert ns["project"] == ["a", "b"] and ns["imports"] == ["m.kinds", "m.more"]
    assert worker_cli.config_overrides(argparse.Namespace(**ns)) == {
        "max_concurrent": 2,
        "database_url": "postgresql://h/db",
        "heartbeat_interval_s": 0.5,
        "heartbeat_stale_s": 3.0,
        "worker_beat_interval_s": 0.25,
        "worker_stale_s": 2.0,
        "shutdown_grace_s": 1.5,
    }
    assert ns["log_level"] == "DEBUG" and ns["secrets"] == "m.keys:provide"


def test_the_cli_hands_the_worker_its_namespace_and_its_exit_code(monkeypatch):
    # Given a worker module that records what it is given
    seen = []
    fake = types.ModuleType("nw.jobs.execution.worker")
    fake.serve = lambda args: seen.append(args) or 7  # a code only the worker can give
    monkeypatch.setitem(sys.modules, "nw.jobs.execution.worker", fake)
    # When the CLI runs it with every flag
    assert cli.main(["worker", *EVERY_FLAG]) == 7
    # Then it got the namespace python -m nw.jobs.execution.worker would have read
    (args,) = seen
    assert _own(args) == vars(worker_cli.build_parser().parse_args(EVERY_FLAG))
    # And a flag the worker does not declare is a usage error, not passed on
    with pytest.raises(SystemExit) as stop:
        cli.main(["worker", "--poll", "1"])
    assert stop.value.code == 2 and len(seen) == 1


def test_python_m_worker_serves_what_its_parser_read(monkeypatch):
    seen = []
    monkeypatch.setattr(worker, "serve", lambda args: seen.append(args) or 5)
    assert worker.main(EVERY_FLAG) == 5
    (args,) = seen
    assert _own(args) == _own(build_parser().parse_args(["worker", *EVERY_FLAG]))


def test_a_worker_on_a_folder_that_is_not_a_project_refuses_in_one_line(tmp_path):
    import subprocess
    import sys

    folder = tmp_path / "typo"
    folder.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nw.jobs.execution.worker",
            "--project",
            str(folder),
            "--import",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "is not an nw-jobs project" in done.stderr
    assert list(folder.iterdir()) == []
