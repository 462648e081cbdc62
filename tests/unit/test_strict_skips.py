"""Under NW_REQUIRE_POSTGRES=1 / NW_REQUIRE_BROWSER=1 (CI) a skip is a failure.

Run as its own pytest in a child process over throwaway test files placed
under ``tests/`` (so the project's conftest, whose report hooks do this,
applies to them), with and without the flag.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

FILES = {
    "test_module_skip.py": 'import pytest\npytest.importorskip("no_such_module_nw")\n'
    "def test_never():\n    pass\n",
    "test_call_skip.py": 'import pytest\ndef test_skips():\n    pytest.skip("no server")\n',
}


@pytest.fixture
def probe_dir():
    where = TESTS / f"_probe_{uuid.uuid4().hex}"
    where.mkdir()
    for name, text in FILES.items():
        (where / name).write_text(text)
    yield where
    shutil.rmtree(where)


def run(where: Path, name: str, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NW_REQUIRE_")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", str(where / name)],
        cwd=TESTS.parent,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_skip_is_a_skip_locally_and_a_failure_under_the_ci_flags(probe_dir, name):
    # Given a test that skips (at import time, or in its body)
    # When it runs without the flags, Then it is skipped and the run passes
    local = run(probe_dir, name)
    assert local.returncode in (0, 5) and "SKIPPED" in local.stdout, local.stdout  # 5: none ran
    # When it runs under either flag, Then the skip fails the run, saying why
    for flag in ("NW_REQUIRE_POSTGRES", "NW_REQUIRE_BROWSER"):
        strict = run(probe_dir, name, **{flag: "1"})
        assert strict.returncode != 0, strict.stdout
        assert "skipped under NW_REQUIRE_POSTGRES/NW_REQUIRE_BROWSER" in strict.stdout
