"""The package as it is built: one sdist and one wheel per session."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``python -m build`` of this checkout: the sdist and the wheel built from it.

    Built from a copy of the files git would commit (tracked or new, not
    ignored): an ``nw_jobs.egg-info`` left in the checkout by an editable
    install keeps the file list of its day, and would hide a file the
    package's configuration no longer ships."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # a tracked file deleted in the work tree is not
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    (sdist,) = out.glob("*.tar.gz")
    return {"wheel": wheel, "sdist": sdist}
