"""The worker process (tier 2): claims queued jobs of registered kinds and runs them.

``nw-jobs worker --project DIR [--project DIR ...] [--import MODULE ...]``

One loop per process: claim as many due jobs as there are free slots (in claim
order, within limits, atomically, so N workers never run one job twice), run them on the
project's bounded pool, and claim again at once while there is a backlog.
Idle, it sleeps on its wake address (enqueue sends it a datagram, or a
PostgreSQL NOTIFY) with a slow poll as the fallback. At boot, and then after
every beat (``worker_beat_interval_s``; a reaping thread judges the runners
the beat statement read), a ``reaper.Reaper`` per project reaps the jobs of
workers that died (silent past ``worker_stale_s`` while others beat,
or provably gone), with the same predicate the facade uses. SIGTERM/SIGINT: stop
claiming, ask running bodies to stop at their next boundary (their jobs go
back to the queue), wait up to ``shutdown_grace_s``, then put back whatever is
still running and exit.

Secrets come from this process, never from the store: environment variables
``NW_SECRET_<NAME>`` become ``secrets["<name>"]``, or ``--secrets
module:callable`` (called with the kind and params) provides them; a
``"fal"`` secret is also bound as the body's fal credential (credentials.py).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any, Literal

from nw.errors import InvalidSetting
from nw.jobs.core import kinds, outcome
from nw.jobs.core.model import DEFAULT_CONFIG, RUNNER_WORKER, JobsConfig
from nw.jobs.core.records import JobRow, attempt_in_run
from nw.jobs.execution import credentials, handback, worker_cli
from nw.jobs.execution.body import Launch
from nw.jobs.execution.credentials import SecretsProvider, env_secrets
from nw.jobs.execution.journal import journal_dir
from nw.jobs.execution.poller import parking_kinds
from nw.jobs.execution.reaper import BeatReaping, Reaper, RunnersRead
from nw.jobs.execution.runtime import Runtime
from nw.jobs.stores import open_store
from nw.jobs.stores.roles import Refill, settled_error
from nw.project import Project, as_project

log = logging.getLogger("nw.jobs.worker")

IDLE_POLL_S = 0.5
CLAIM_BATCH_S = 0.005


class Worker:
    def __init__(
        self,
        projects: Sequence[Project | str],
        *,
        config: JobsConfig = DEFAULT_CONFIG,
        kinds_: Sequence[str] | None = None,
        secrets: SecretsProvider = env_secrets,
    ):
        if not projects:
            raise InvalidSetting("a worker needs at least one project")
        self.config = config
        self.projects = [as_project(p) for p in projects]
        self._kinds = list(kinds_) if kinds_ is not None else None
        if secrets is env_secrets:  # the environment is read once, not per job
            snapshot = env_secrets("", {})
            secrets = lambda kind, params: snapshot  # noqa: E731
        self._secrets = secrets
        self.stopping = threading.Event()
        self.runner_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._backlog = False
        self._last_claim = 0.0
        self._lock = threading.Lock()
        self._refilled: set[str] = set()
        self._claiming = 0
        """Slots reserved by claims in flight, the loop's own and refills' (asked
        for or claimed, not yet launched): a body that ends meanwhile must not
        count them as free."""
        self._unreserved = threading.Condition(self._lock)
        """Notified when reserved slots are given back (a drain waits for them)."""
        self._loaded: dict[str, Callable] = {}
        self._poker = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._poker.setblocking(False)
        self.runtimes: list[Runtime] = []
        self.reapers: list[Reaper] = []
        self._launches: dict[str, Launch] = {}
        self._started: dict[str, tuple[str, int, float]] = {}
        """Per running job: its kind, attempt in the run, and when it started (the log)."""
        self.stopped_back = 0
        self._count_lock = threading.Lock()
        """Jobs whose body stopped for the shutdown and went back to the queue."""
        self._listener: Any = None  # the store's wake_listener
        self._reaping = BeatReaping(self._after_beat)
        booted = config.clock()  # its reapers are blind from here (an outage at boot)
        for project in self.projects:
            store = open_store(project, config, create=True)
            if self._listener is None:
                self._listener = store.wake_listener(self.runner_id)
            else:  # PostgreSQL: LISTEN on this project's channel too (a no-op on SQLite)
                self._listener.also(store)
            rt = Runtime(
                store,
                config,
                role=RUNNER_WORKER,
                runner_id=self.runner_id,
                info={"wake": self._listener.address, "kinds": self.kinds()},
                on_release=self._released,
                journal=journal_dir(project.root),
            )
            # Outcomes a stopped worker could not record, written before this
            # one claims or reaps anything (its reaper is fed from below on).
            rt.finishing.replay()
            self.runtimes.append(rt)
            reaper = Reaper(store, config, rt.holds, started=booted)
            self.reapers.append(reaper)
            rt.on_beat = lambda read, reaper=reaper: self._beaten(reaper, read)
            if parking_kinds(self.kinds()):  # its parked jobs, and any dead worker's
                rt.poll_parked(
                    project,
                    self.kinds,
                    setup=functools.partial(credentials.under_secrets, self._secrets),
                )
            store.refill = Refill(
                kinds=self.kinds,
                runner_id=self.runner_id,
                want=self._refill_want,
                take=functools.partial(self._take, rt),
                clock=config.clock,
            )

    # ----- bookkeeping -----------------------------------------------------------
    def _released(self, job_id: str) -> None:
        """A slot is free: claim again, but only if more may be queued (an idle
        queue announces new jobs itself, so an empty claim here is a wasted round trip)."""
        launch = self._launches.pop(job_id, None)
        decided = launch.decided if launch is not None else None
        if decided is not None and decided.requeued and self.stopping.is_set():
            with self._count_lock:  # pool threads release concurrently
                self.stopped_back += 1  # stopped at a boundary, put back in the queue
        started = self._started.pop(job_id, None)
        if started is not None:  # after the count: a draining worker is waiting on it
            kind, attempt, at = started
            log.info(
                "end   %s %s attempt %s: %s in %.1fs",
                kind,
                job_id[:12],
                attempt,
                "parked" if launch is not None and launch.parked else _said(decided),
                time.monotonic() - at,
            )
        with self._lock:  # its finish may have claimed in its place (then no slot is free)
            self._refilled.discard(job_id)
        if self._backlog and self.busy < self.config.max_concurrent:
            self._poke()

    def _refill_want(self, finishing: Sequence[str]) -> int:
        """How many jobs a batch of finishes (these job ids) should claim in their
        place: every slot that is free once they are written, while more may be
        queued. Jobs held but already replaced by an earlier refill (committed,
        their thread not yet returned) do not occupy a slot."""
        if not self._backlog or self.stopping.is_set():
            return 0
        # Only our own bodies free a slot (a reap may finish another worker's job).
        with self._lock:
            held = {job_id for rt in self.runtimes for job_id in rt.held_jobs()}
            mine = [j for j in finishing if j in held and j not in self._refilled]
            # Held jobs already replaced by a refill hold no slot; one its runtime
            # has let go of (its ``_released`` still to come) is out of ``held``.
            replaced = len(self._refilled & held)
            occupied = len(held) + self._claiming - replaced - len(mine)
            self._refilled.update(mine)
            asked = max(self.config.max_concurrent - occupied, 0)
            self._claiming += asked  # taken until ``_take`` answers this claim
        return asked

    def _take(self, rt: Runtime, rows: list[JobRow] | None, asked: int) -> None:
        """Launch what a finish claimed in its slots (the finishing thread);
        ``rows=None``: that claim was not made."""
        try:
            if rows is not None:
                self._backlog = len(rows) >= asked  # fewer than asked: the queue is empty
                for row in rows:
                    self._launch_safely(rt, row)
        finally:
            self._unreserve(asked)

    def _poke(self) -> None:
        """Wake our own loop (a slot freed, or we are stopping)."""
        if self._listener is None or not self._listener.address:
            return
        with contextlib.suppress(OSError):
            self._poker.sendto(b"!", "\0" + self._listener.address)

    def kinds(self) -> list[str]:
        return self._kinds if self._kinds is not None else kinds.registered_kinds()

    @property
    def busy(self) -> int:
        """Slots taken: bodies held by this worker's runtimes (running, or
        handed to a pool), and those reserved by claims in flight."""
        return sum(rt.busy for rt in self.runtimes) + self._claiming

    # ----- the loop --------------------------------------------------------------
    def _beaten(self, reaper: Reaper, read: RunnersRead | Literal[False] | None) -> None:
        """A beat of the project's runtime (the beat thread): its reaper judges
        what it read on the reaping thread, or learns that the store failed it."""
        if read is False:
            reaper.unreachable()
        else:
            self._reaping.offer(reaper, read)

    def _after_beat(self, reaper: Reaper, read: RunnersRead | None) -> None:
        """On the reaping thread, after a beat that reached the store: put back
        what lost claims took, then reap."""
        rt = self.runtimes[self.reapers.index(reaper)]
        handback.put_back_lost(rt.store, self.runner_id, self.config)
        self._reap(reaper, read=read)

    def recover(self) -> list[str]:
        """Reap what dead workers left running: a full pass of every project at
        boot (from then on each beat feeds its project's reaper, ``_beaten``).
        A project whose reaper is already in a pass is left to it: its first
        pass is a full one, and the loop must not wait behind it."""
        return [
            job_id
            for reaper in self.reapers
            for job_id in self._reap(reaper, full=True, wait=False)
        ]

    def _reap(
        self,
        reaper: Reaper,
        *,
        full: bool = False,
        read: RunnersRead | None = None,
        wait: bool = True,
    ) -> list[str]:
        try:
            reaped = reaper.tick(full=full, read=read, wait=wait)
        except Exception:
            log.exception("reaping %s failed", reaper.store)
            return []
        if reaped:
            log.warning("recovered %d job(s) whose worker was gone", len(reaped))
        return reaped

    def _claim_due(self) -> bool:
        """Claim now, or let a few more slots free up so one claim takes several.

        An idle worker claims at once (enqueue-to-start latency); a busy one
        claims when half its slots are free or ``CLAIM_BATCH_S`` after its last
        claim, so a backlog of short jobs costs one claim per batch, not per job
        (on PostgreSQL the finishes claim in their slots' place, see ``Refill``).
        """
        cap, busy = self.config.max_concurrent, self.busy
        free = cap - busy
        due = busy == 0 or 2 * free >= cap
        due = due or time.monotonic() - self._last_claim >= CLAIM_BATCH_S
        if due:
            self._last_claim = time.monotonic()
        return due

    def claim_once(self) -> int:
        """Claim up to the free slots across projects; how many were started."""
        started = 0
        names = self.kinds()
        for rt in self.runtimes:
            if self.stopping.is_set():
                break
            with self._reserving() as free:
                if free <= 0:
                    break
                try:
                    rows = self._claim(rt, names, free)
                except Exception:
                    log.exception("claiming from %s failed", rt.store)
                    continue
                self._backlog = len(rows) == free  # a full batch: there may be more
                for row in rows:
                    self._launch_safely(rt, row)
                    started += 1
        return started

    def _claim(self, rt: Runtime, names: Sequence[str], free: int) -> list[JobRow]:
        """``free`` jobs' claim from ``rt``'s store; the runner's beat rides it
        (one round trip for both) once half a beat interval has passed since
        the last, so a worker in a trickle of jobs beats for nothing."""
        now = self.config.clock()
        if not rt.beat_may_ride():
            return rt.store.claim(names, now=now, runner_id=self.runner_id, limit=free)
        asked = time.monotonic()
        rows, runners = rt.store.claim_and_beat(
            names, now=now, runner_id=self.runner_id, limit=free
        )
        if runners is not None:
            rt.rode(RunnersRead(runners, asked, time.monotonic(), now))
        return rows

    @contextlib.contextmanager
    def _reserving(self) -> Iterator[int]:
        """The free slots, reserved for a claim until its rows are launched."""
        with self._lock:
            free = max(self.config.max_concurrent - self.busy, 0)
            self._claiming += free
        try:
            yield free
        finally:
            self._unreserve(free)

    def _unreserve(self, slots: int) -> None:
        """A claim's rows are launched (``busy`` counts them now), or it got none."""
        with self._lock:
            self._claiming -= slots
            self._unreserved.notify_all()

    def _launch_safely(self, rt: Runtime, row: JobRow) -> None:
        """Launch one claimed job; whatever goes wrong ends that job (as the
        outcome policy decides: ``outcome.end_unlaunched``), not the loop."""
        try:
            self._launch(rt, row)
        except Exception as exc:
            job_id = row.record.get("job_id")
            if isinstance(exc, kinds.KindImportError):
                message = str(exc)  # names the registered path that does not import
                log.error("%s", exc)
            else:
                message = f"the worker could not launch this job: {type(exc).__name__}: {exc}"
                log.exception("job %s could not be launched", job_id)
            # The job keeps a slot until its end is written. Not decided here:
            # that reads the job again (a cancel asked since its claim wins), and
            # this may be a committer's thread, launching a refill.
            with self._lock:
                self._claiming += 1
            ending = threading.Thread(
                target=self._end_unlaunched,
                args=(rt, row, message),
                name=f"unlaunched-{str(job_id)[:12]}",
                daemon=True,
            )
            try:
                ending.start()
            except RuntimeError:  # no thread to be had (the interpreter is exiting)
                self._end_unlaunched(rt, row, message)

    def _end_unlaunched(self, rt: Runtime, row: JobRow, message: str) -> None:
        job_id: Any = row.record.get("job_id")
        try:
            written = outcome.end_unlaunched(rt.store, row, message, self.config)
        except Exception as exc:  # the read, or building the write, failed
            written = settled_error(exc)
        written.add_done_callback(lambda w: self._launch_failed(w, job_id))

    def _launch_failed(self, written: Future, job_id: str) -> None:
        """A job that could not be launched: its end written (or not), its slot free."""
        if written.exception() is not None:
            log.error(
                "job %s: could not record the failed launch", job_id, exc_info=written.exception()
            )
        self._unreserve(1)
        self._released(job_id)

    def _launch(self, rt: Runtime, row: JobRow) -> None:
        rec = row.record
        spec = kinds.kind_spec(rec["kind"])
        if spec is None:
            raise kinds.KindImportError(f"kind {rec['kind']!r} is not registered in this worker")
        fn = self._loaded.get(spec.path)
        if fn is None:  # imported once per kind, not per job
            fn = self._loaded[spec.path] = spec.load()
        launch = Launch(
            fn=fn,
            project=_project_of(rt, self),
            setup=functools.partial(
                credentials.attach_secrets, self._secrets, rec["kind"], rec.get("params") or {}
            ),
            stopping=self.stopping,
            timeout_s=spec.timeout_s,
            cancel_on_timeout=spec.cancel_on_timeout,
        )
        self._launches[rec["job_id"]] = launch
        attempt = attempt_in_run(rec)
        self._started[rec["job_id"]] = (rec["kind"], attempt, time.monotonic())
        # At DEBUG: INFO's one line per job is its end, which says everything
        # (two lines per job cost a burst of short jobs 15% of its drain rate).
        log.debug("start %s %s attempt %s", rec["kind"], rec["job_id"][:12], attempt)
        rt.run_claimed(row, launch)

    def run(self) -> int:
        """Serve until ``stopping`` is set; returns the process exit code."""
        booted = False  # the boot reap comes right after the first claim, not before it
        log.info(
            "worker %s serving %d project(s), kinds: %s",
            self.runner_id,
            len(self.runtimes),
            ", ".join(self.kinds()) or "none",
        )
        while not self.stopping.is_set():
            # At boot, and woken by a NOTIFY/datagram (a job was queued), by our
            # own poke (a slot freed while more was queued) or by the slow poll:
            # claim what fits. A wake we cannot act on (no free slot) is kept as
            # a backlog, so the next freed slot claims.
            wait = IDLE_POLL_S
            if self.busy >= self.config.max_concurrent:
                self._backlog = True
            elif self._claim_due():
                self.claim_once()
                if self._backlog and self.busy < self.config.max_concurrent:
                    continue  # a full batch and room left: more may be queued
            elif self._backlog:
                wait = CLAIM_BATCH_S  # more is queued: let a few slots free up, then claim
            if not booted:  # bodies already run meanwhile: a backlog is not held up
                booted = True
                self.recover()
            self._listener.wait(wait)
        return self._drain()

    def _drain(self) -> int:
        self._reaping.close()
        deadline = time.monotonic() + self.config.shutdown_grace_s
        for rt in self.runtimes:
            rt.wait_idle(timeout=max(deadline - time.monotonic(), 0.0))
        with self._lock:  # and what is still being written for them (failed launches)
            self._unreserved.wait_for(
                lambda: self._claiming <= 0, timeout=max(deadline - time.monotonic(), 0.0)
            )
        leftover = 0
        for rt in self.runtimes:
            handback.put_back_lost(rt.store, self.runner_id, self.config)
            for job_id in rt.held_jobs():  # still running after the grace: put them back
                leftover += self._put_back(rt, job_id)
            rt.close(wait=False)
        if self._listener is not None:
            self._listener.close()
        self._poker.close()
        log.info(
            "worker %s stopped: %d job(s) requeued (%d stopped at a boundary,"
            " %d still running after the grace period)",
            self.runner_id,
            self.stopped_back + leftover,
            self.stopped_back,
            leftover,
        )
        return 0

    def _put_back(self, rt: Runtime, job_id: str) -> int:
        """Requeue a job whose body outlived the grace period (1 if written).
        Not one whose outcome is on its way to the store: a requeue before that
        write lands would fence it out (the result lost, the job run again)."""
        launch = self._launches.get(job_id)
        if launch is not None and launch.handed_over:
            return 0
        row = rt.store.get(job_id)
        if row is None or row.status.value != "running":
            return 0
        return handback.give_back(
            rt.store, row, self.runner_id, self.config, cancelled=False, how=outcome.Ended.STOPPED
        )

    def close_unused(self) -> None:
        """A worker that will not run (nothing to claim): unregister and let go."""
        for rt in self.runtimes:
            rt.close(wait=False)
        self._reaping.close()
        self._listener.close()

    def stop(self, *_: Any) -> None:
        self.stopping.set()
        self._poke()


def _said(decided: outcome.Outcome | None) -> str:
    """How an attempt ended, for the per-job log line (the words of ``Job.attempts``)."""
    return "not recorded" if decided is None else decided.ended or "ended"


def _project_of(rt: Runtime, worker: Worker) -> Project:
    return worker.projects[worker.runtimes.index(rt)]


#: Run a worker as ``worker_cli``'s namespace says (``nw-jobs worker``).
serve = worker_cli.serve


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m nw.jobs.execution.worker``: the same arguments as ``nw-jobs worker``."""
    return serve(worker_cli.build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
