"""Is a job's worker alive? One predicate, used by the reaper and by every ``Job``.

A screen and the reaper must never disagree about "alive", so both call
``worker_responsive`` (through ``should_reap``). ``None`` means unknowable
(not running, or nothing ever beat), which is not the same claim as dead.

Two signs of life, written by one beat thread per process:

* the **worker's beat** (``runners.beat_at``, every ``worker_beat_interval_s``):
  the process is alive. Provably gone (same pid space, pid free or reused:
  ``WorkerSeen.gone``), or silent for ``worker_stale_s`` while another
  process kept beating, it is dead, and every job it held is dead with it.
  This is what finds a killed worker in seconds. Silence is measured against
  the freshest beat of the others (``WorkerSeen.others_at``), not the
  reader's clock alone: when the store itself was unreachable (a database
  restart) every beat is old, and nobody is judged on that. Nor on the
  reader's own **blind spells** (``WorkerSeen.blind``: when its store calls
  failed or hung, from its last answer to its next; a worker's boot until its
  first): silence counts only outside them, for both beats below.
* the **job's heartbeat** (``jobs.heartbeat_at``, every
  ``heartbeat_interval_s``): the process still holds this job. Silent for
  ``heartbeat_stale_s`` the job is dead even if its process lives on. A job
  whose worker is not announced (no runners row: an older record, or a
  process that unregistered) is judged by this beat alone, as before.

Reap rule: a running or cancelling job is closed when no worker in this
process holds it and it is not responsive or, when nothing ever beat, it
started more than ``stale_running_s`` ago. A job queued for an in-process
body (``runs_inproc``) can only ever run in the process that enqueued it, so
it is closed when that process is dead or gone. A parked job (its body handed
the work to a provider, ``nw.jobs.core.parked``) is held by no process: it is
never reaped, and any live poller of its kind resumes it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nw.jobs.core.model import RUNNER_INPROC, RUNNER_INPROC_LEGACY, JobsConfig
from nw.jobs.core.parked import is_parked

_LIVE = ("running", "cancelling")

#: How long a dead worker stays announced after its last beat (listed as
#: ``lost`` by ``nw-jobs workers``, the console and ``/metrics``); then the
#: reaper removes its row.
LOST_KEPT_S = 3600.0


def runs_inproc(record: Mapping[str, Any]) -> bool:
    """The job's body runs in the process that enqueued it (records stored
    before the rename say ``local``)."""
    return record.get("runner") in (RUNNER_INPROC, RUNNER_INPROC_LEGACY)


@dataclass(frozen=True)
class WorkerSeen:
    """What the store (and this host) says of one worker process."""

    beat_at: float
    """Its last beat (epoch seconds)."""
    gone: bool = False
    """Proved exited by this process (same pid space; see ``nw.jobs.execution.procs``)."""
    others_at: float = math.inf
    """The freshest beat of any other announced process (-inf: none; inf: not
    known, so the reader's clock alone decides)."""
    blind: tuple[tuple[float, float], ...] = ()
    """The reader's blind spells (start, end; the store's clock): when it could
    not reach the store, so no beat could be written either; silence within
    them proves nothing."""

    def silent_s(self, since: float, now: float) -> float:
        """Seconds of silence after ``since`` that the others' beats prove,
        the reader's blind spells left out."""
        return self.outside_blind(since, min(now, self.others_at))

    def outside_blind(self, since: float, until: float) -> float:
        """Seconds from ``since`` to ``until`` outside the reader's blind spells."""
        span = until - since
        for start, end in self.blind:
            span -= max(min(until, end) - max(since, start), 0.0)
        return span

    def unproved(self, since: float, now: float, stale_s: float) -> bool:
        """A silence since ``since`` (the reader's clock) is not proved to last
        ``stale_s``: shorter than that once the reader's blind spells are left
        out (an outage it lived through silenced everyone, and judges nobody)."""
        return self.outside_blind(since, now) < stale_s


def last_sign_of_life(record: Mapping[str, Any], worker: WorkerSeen | None) -> float | None:
    """The latest moment the job's worker is known to have been alive."""
    signs: list[Any] = [record.get("heartbeat_at")]
    if worker is not None and record.get("heartbeat_at") is not None:
        signs.append(worker.beat_at)  # the worker's beat counts once the job is its own
    signs = [float(s) for s in signs if s is not None]
    return max(signs) if signs else None


def worker_silent_s(
    record: Mapping[str, Any], now: float, worker: WorkerSeen | None = None
) -> float | None:
    last = last_sign_of_life(record, worker)
    return None if last is None else max(now - last, 0.0)


def heartbeat_is_fresh(record: Mapping[str, Any], now: float, config: JobsConfig) -> bool | None:
    """The job's own heartbeat: its worker still holds it (None: it never beat)."""
    beat = record.get("heartbeat_at")
    return None if beat is None else now - float(beat) < config.heartbeat_stale_s


def worker_alive(worker: WorkerSeen, now: float, config: JobsConfig) -> bool:
    """The process itself (owner of queued in-process jobs): gone, silent while
    others beat, or silent for the seed's ``heartbeat_stale_s`` is dead."""
    if worker.gone or not worker.unproved(worker.beat_at, now, config.heartbeat_stale_s):
        return False
    return worker.silent_s(worker.beat_at, now) < config.worker_stale_s


def worker_responsive(
    status: str,
    record: Mapping[str, Any],
    now: float,
    config: JobsConfig,
    worker: WorkerSeen | None = None,
) -> bool | None:
    if status not in _LIVE or is_parked(record):  # parked: no process holds it
        return None
    held = heartbeat_is_fresh(record, now, config)
    if worker is None or held is None:
        return held
    # The claim stamps the job's first beat: a worker that beat since then, or
    # that claimed it a moment ago, is alive.
    if worker.gone:
        return False
    if not held:  # stale by the reader's clock; proved so outside its blind spells?
        held = worker.unproved(float(record["heartbeat_at"]), now, config.heartbeat_stale_s)
    since = last_sign_of_life(record, worker)
    assert since is not None  # held is not None: the job has a heartbeat
    silent = worker.silent_s(since, now)
    return held and silent < config.worker_stale_s


def should_reap(
    status: str,
    record: Mapping[str, Any],
    now: float,
    config: JobsConfig,
    *,
    held: bool,
    worker: WorkerSeen | None = None,
) -> bool:
    """``held``: a thread of this process holds the job (it is alive).
    ``worker``: the job's runner as the store announces it (None: not announced)."""
    if held or (status in _LIVE and is_parked(record)):  # a provider holds a parked job
        return False
    if status == "queued" and runs_inproc(record):
        return worker is None or not worker_alive(worker, now, config)
    if status not in _LIVE:
        return False
    responsive = worker_responsive(status, record, now, config, worker)
    if responsive is not None:
        return not responsive
    started = record.get("started_at") or record.get("created_at")
    return started is not None and now - float(started) > config.stale_running_s
