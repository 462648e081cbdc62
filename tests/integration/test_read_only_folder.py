"""A project folder this process cannot write is still readable (embedded store).

After a clean close there is no ``-shm`` file, and SQLite in WAL mode wants to
create one even to read. ``summarize`` (the read-only path) and ``list_jobs``
(which then reads without reaping) must answer anyway. When the tests run as
root (who may write anywhere), the folder is given to ``nobody`` and the
reader stays root but without the capabilities that override file modes, so
it can still read the checkout and its virtual environment wherever they
live (a private ``/root`` or ``mktemp -d`` folder included); otherwise the
folder is made read-only for us.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import nw
from nw import jobs
from nw.jobs.execution.runtimes import shutdown_runtimes
from nw.jobs.stores import close_shared_stores
from tests.helpers import REPO, wait_until

NOBODY = 65534
READ = """
import json, sys
from nw import jobs
root = sys.argv[1]
print(json.dumps({
    "summarize": [j.job_id for j in jobs.summarize(root)],
    "list_jobs": [j.job_id for j in jobs.list_jobs(root)],
    "running": [j.job_id for j in jobs.list_jobs(root, status="running")],
}))
"""


@pytest.fixture
def shared_folder():
    """A folder other users may read (pytest's tmp_path is private to us)."""
    path = Path(tempfile.mkdtemp(prefix="nw-ro-"))
    path.chmod(0o755)
    yield path
    for sub in path.rglob("*"):
        if sub.is_dir():
            sub.chmod(0o755)
    path.chmod(0o755)
    shutil.rmtree(path, ignore_errors=True)


# What lets root write where the mode says no: dropped from the reader's bounding
# and inheritable sets before it starts, so uid 0 keeps only the owner's rights.
OVERRIDES = "-dac_override,-fowner,-chown"


def _read_as_someone_who_cannot_write(root: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", READ, str(root)]
    env = {**os.environ, "PYTHONPATH": REPO}
    env.pop("NW_JOBS_DATABASE_URL", None)
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("needs setpriv to read without root's overrides")
        for sub in [root, *root.rglob("*")]:
            os.chown(sub, NOBODY, NOBODY)
            sub.chmod(0o755 if sub.is_dir() else 0o644)
        cmd = ["setpriv", "--inh-caps=-all", f"--bounding-set={OVERRIDES}", *cmd]
    else:
        for sub in [root, *root.rglob("*")]:
            mode = sub.stat().st_mode
            sub.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, cwd="/")


def test_a_read_only_project_folder_can_be_summarized_and_listed(shared_folder):
    project = nw.Project.init(shared_folder / "proj")
    done = jobs.enqueue(project, "r", {}, dispatch={"r": lambda project, params: {"ok": 1}})
    wait_until(lambda: jobs.get_job(project, done.job_id).is_terminal)
    shutdown_runtimes()
    close_shared_stores()  # a clean close: the WAL is folded in, -wal and -shm removed
    store_dir = shared_folder / "proj" / ".nw" / "jobs"
    assert not list(store_dir.glob("*-shm"))
    before = {p.name: p.read_bytes() for p in store_dir.iterdir()}
    out = _read_as_someone_who_cannot_write(shared_folder / "proj")
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen == {"summarize": [done.job_id], "list_jobs": [done.job_id], "running": []}
    assert {p.name: p.read_bytes() for p in store_dir.iterdir()} == before  # nothing written
