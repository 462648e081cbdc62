"""Proof that a recorded process is gone: only in its own pid space, never a guess."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from nw.jobs.execution import procs
from tests.helpers import wait_until

pytestmark = pytest.mark.skipif(procs.scope() is None, reason="needs Linux /proc")


def test_this_process_is_not_gone():
    assert procs.provably_gone(procs.this_process()) is False


def test_a_reused_pid_is_another_process():
    me = procs.this_process()
    assert procs.provably_gone({**me, "proc_start": me["proc_start"] + 1}) is True


def test_an_exited_process_is_gone_whether_or_not_it_was_waited_for():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    info = {**procs.this_process(), "pid": child.pid, "proc_start": procs.start_ticks(child.pid)}
    assert procs.provably_gone(info) is False
    child.send_signal(signal.SIGKILL)
    wait_until(lambda: procs.provably_gone(info), what="the zombie to read as gone")
    child.wait()
    assert procs.provably_gone(info) is True


def test_nothing_is_proved_about_another_pid_space_or_an_incomplete_record():
    me = procs.this_process()
    assert procs.provably_gone({**me, "proc_scope": "another-host:1", "proc_start": 1}) is False
    assert procs.provably_gone({"host": me["host"], "pid": os.getpid() + 10**7}) is False


def test_the_predicate_takes_the_proof_and_the_silence_of_the_worker():
    from nw.jobs import JobsConfig
    from nw.jobs.core.liveness import WorkerSeen, should_reap, worker_responsive

    config = JobsConfig()  # the defaults: job beat 20/120 s, worker beat 1/6 s
    now = 1000.0
    rec = {"heartbeat_at": now - 15, "started_at": now - 30, "runner_id": "w"}
    alive, silent = WorkerSeen(now - 1), WorkerSeen(now - 7)
    gone = WorkerSeen(now - 0.1, gone=True)
    assert worker_responsive("running", rec, now, config, alive) is True
    assert worker_responsive("running", rec, now, config, silent) is False
    assert worker_responsive("running", rec, now, config, gone) is False
    assert worker_responsive("running", rec, now, config, None) is True  # not announced
    assert worker_responsive("queued", rec, now, config, gone) is None
    assert should_reap("running", rec, now, config, held=False, worker=silent)
    assert not should_reap("running", rec, now, config, held=True, worker=gone)
    just_claimed = {**rec, "heartbeat_at": now - 0.5}  # by a worker idle for a minute
    assert worker_responsive("running", just_claimed, now, config, WorkerSeen(now - 60)) is True


def test_silence_counts_only_while_the_others_were_heard():
    from nw.jobs import JobsConfig
    from nw.jobs.core.liveness import WorkerSeen, worker_responsive

    config, now = JobsConfig(), 1000.0
    rec = {"heartbeat_at": now - 15, "started_at": now - 30, "runner_id": "w"}
    # Everyone went quiet together (the store was down): nobody is judged on it.
    outage = WorkerSeen(now - 9, others_at=now - 8.5)
    assert worker_responsive("running", rec, now, config, outage) is True
    # The others beat on while this one did not: dead.
    alone = WorkerSeen(now - 9, others_at=now - 0.5)
    assert worker_responsive("running", rec, now, config, alone) is False
    # Nobody else announced: the worker's silence proves nothing; the job's beat decides.
    assert worker_responsive("running", rec, now, config, WorkerSeen(now - 9, False, -1e18))
