"""A process's machinery for one store: the bounded pool, the heartbeat, the live map.

Bodies run on ``PooledThreadBackend`` (``pool.py``), an au ``ThreadBackend``
whose threads come from a pool of ``max_concurrent``: jobs beyond the cap wait queued
instead of each getting a thread. One heartbeat thread per runtime stamps
the process's own beat every ``worker_beat_interval_s`` (one small write: the
runners row; in a worker, the same statement reads every runner, for the
reaper that a thread of its own ticks with it) and, every
``heartbeat_interval_s``, every held job in one coalesced write, learning of
cancels requested by other processes. Where the store sends a claim and the
runner's beat in one round trip (``JobStore.claim_and_beat``), a worker's
claims carry the beat when it is half due and the thread waits an interval
from that beat instead. Runtimes are made on first need by the
write paths (``enqueue``, the worker); the read paths never make one.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from au import (
    ComputationResult,
    ComputationStatus,
)

from nw.jobs.core import kinds, outcome
from nw.jobs.core.limits import NotYet
from nw.jobs.core.model import RUNNER_INPROC, JobsConfig
from nw.jobs.core.records import JobRow, waits_on_upstreams
from nw.jobs.execution import procs
from nw.jobs.execution.body import Launch, run_attempt
from nw.jobs.execution.journal import Finishing
from nw.jobs.execution.learning import DurationLearningMiddleware
from nw.jobs.execution.poller import Poller, Setup
from nw.jobs.execution.pool import PooledThreadBackend
from nw.jobs.execution.reaper import RunnersRead
from nw.jobs.execution.step_waits import StepWaits
from nw.jobs.stores.base import JobStore

log = logging.getLogger("nw.jobs")
#: How often an in-process job held by a delay or a full limit asks again.
NOT_YET_POLL_S = 0.2


def _placement(rec: Any) -> tuple[int, float | None]:
    """A held job's place in the pool, as its record stores it: its priority
    and its due time (``not_before``; None: now)."""
    not_before = rec.get("not_before")
    due = float(not_before) if isinstance(not_before, (int, float)) else None
    return int(rec.get("priority") or 0), due


def unlaunched(store: JobStore, row: JobRow, exc: BaseException, config: JobsConfig) -> None:
    """An in-process job whose body this process could not hand to its pool:
    ended as the outcome policy decides (``outcome.end_unlaunched``)."""
    message = f"could not start the job in this process: {type(exc).__name__}: {exc}"
    outcome.end_unlaunched(store, row, message, config).result()


class Runtime:
    """Runs bodies for one store in this process."""

    def __init__(
        self,
        store: JobStore,
        config: JobsConfig,
        *,
        role: str = RUNNER_INPROC,
        runner_id: str | None = None,
        info: dict[str, Any] | None = None,
        on_release: Callable[[str], None] | None = None,
        journal: Path | None = None,
    ):
        self.store = store
        self.finishing = Finishing(store, journal)
        """Outcomes the store did not take, written again until it does
        (``journal``: the folder that keeps them across a restart; None: in
        memory only)."""
        self.config = config
        self.runner_id = runner_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._on_release = on_release
        self._hand_over = role != RUNNER_INPROC
        """A worker's body thread hands its outcome to the store and is free at
        once; the slot waits for the commit (its claims never outnumber its
        slots). An in-process body's thread waits for the commit itself: its
        pool also starts the jobs queued for a thread, and an exiting process
        joins that thread, so a result is never left uncommitted."""
        self.on_beat: Callable[[RunnersRead | Literal[False] | None], None] | None = None
        """Called on the beat thread after each beat, with the runners it read
        (None: it read none; False: the beat failed). A worker feeds its reaper."""
        self.learning = DurationLearningMiddleware(record=self._learn, config=config)
        self.backend = PooledThreadBackend(
            store.status,
            [self.learning],
            config.max_concurrent,
            done=lambda key, args: self._release(key, args[-1]),
        )
        self._launches: dict[str, Launch] = {}
        self.poller: Poller | None = None
        """Looks after the parked jobs of its kinds (started by ``poll_parked``)."""
        self._steps: StepWaits | None = None
        """Its pipeline steps waiting on their upstreams (``submit_after``)."""
        self._timers: dict[str, threading.Timer] = {}
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._beater: threading.Thread | None = None
        self._beat_failing = False
        """The last beat failed (its error is logged once per outage)."""
        self._beat_at = time.monotonic()
        """When the runner's own beat last went (``time.monotonic``), on the
        beat thread or riding a claim (``rode``)."""
        me = {
            "role": role,
            **procs.this_process(),
            "slots": config.max_concurrent,
            **(info or {}),
        }
        store.register_runner(self.runner_id, me, now=config.clock())
        if role != RUNNER_INPROC:  # a worker beats from its start: readers judge its claims by it
            self._ensure_beater()

    # ----- learning --------------------------------------------------------------
    def _learn(self, samples: dict[str, float]) -> None:
        try:
            self.store.add_samples(
                samples, now=self.config.clock(), window=self.config.sample_window_k
            )
        except Exception:
            log.exception("could not record duration samples %s", list(samples))

    # ----- running ---------------------------------------------------------------
    def holds(self, job_id: str) -> bool:
        """This process holds the job: running it (the learning middleware's
        started map), keeping it queued for a free pool thread, or keeping its
        outcome until the store takes it (``finishing``)."""
        if self.learning.is_running(job_id) or self.finishing.holds(job_id):
            return True
        with self._lock:
            return job_id in self._launches

    def is_finishing(self, job_id: str) -> bool:
        """The job's body has ended and its outcome waits for the store (``journal``)."""
        return self.finishing.holds(job_id)

    def local_cancel(self, job_id: str) -> None:
        if self.finishing.holds(job_id):  # it already returned: its outcome stands
            self.finishing.nudge()  # the cancel reached the store; so may the outcome now
        with self._lock:  # set under the lock: ``_schedule`` reads it there (no timer after)
            launch = self._launches.get(job_id)
            timer = self._timers.pop(job_id, None)
            if launch is not None:
                launch.cancel.set()
        if launch is not None and self._steps is not None:  # a waiting step: let it go
            self._steps.nudge()
        if timer is not None:  # delayed: to the pool now, where its start finds it
            timer.cancel()  # cancelled and lets it go (``_due`` will not launch it again)
            self.backend.launch(self._start_and_run, (job_id, launch), {}, job_id)

    def submit(
        self, job_id: str, launch: Launch, *, priority: int = 0, not_before: float | None = None
    ) -> None:
        """Run a job this process enqueued, when a pool thread is free (higher
        ``priority`` first); a delayed one joins the pool's queue only when due,
        so it holds no thread while it waits."""
        before = self._hold(job_id, launch)
        try:
            self._ensure_beater()
            self._schedule(job_id, launch, priority, not_before)
        except BaseException:
            self._unhold(job_id, launch, before)
            raise

    def submit_after(self, job_id: str, launch: Launch) -> None:
        """Run a pipeline step this process enqueued once the store releases it
        (its upstreams succeeded): it holds no pool thread while it waits
        (``step_waits``), and lets go when the store ends it instead."""
        if self._stop.is_set():  # as ``submit`` on a shut pool: the caller ends it
            raise RuntimeError("this process's runtime is closed")
        before = self._hold(job_id, launch)
        try:
            self._ensure_beater()  # its owner's beat keeps the waiting step alive
            with self._lock:
                if self._steps is None:
                    self._steps = StepWaits(self.store, self._released, self._release)
            self._steps.add(job_id, launch)
        except BaseException:
            self._unhold(job_id, launch, before)
            raise

    def take(self, row: JobRow, launch: Launch) -> None:
        """Hold a new in-process job as its record says: a step whose upstreams
        have not released it until they do (``submit_after``), any other for
        the pool at its priority, once its delay ends (``submit``). One this
        runtime cannot take is ended (``unlaunched``) and the error raised."""
        job_id = row.record["job_id"]
        try:
            if waits_on_upstreams(row.record):
                self.submit_after(job_id, launch)
            else:
                priority, due = _placement(row.record)
                self.submit(job_id, launch, priority=priority, not_before=due)
        except BaseException as exc:  # e.g. the runtime is shutting down
            unlaunched(self.store, row, exc, self.config)
            raise

    def take_all(self, held: list[tuple[JobRow, Launch]]) -> None:
        """``take`` of each new in-process job ``(row, launch)``: one this
        runtime cannot take is ended (unlaunched) and the rest still held; the
        first such error is raised after."""
        failed: BaseException | None = None
        for row, launch in held:
            try:
                self.take(row, launch)
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def _released(self, row: JobRow) -> None:
        job_id = row.record["job_id"]
        with self._lock:
            launch = self._launches.get(job_id)
        if launch is None:
            return
        try:
            self._schedule(job_id, launch, *_placement(row.record))
        except Exception as exc:  # no thread to be had: ended as a failed launch is
            try:
                unlaunched(self.store, row, exc, self.config)
            finally:
                self._release(job_id, launch)
            raise

    def _schedule(
        self, job_id: str, launch: Launch, priority: int, not_before: float | None
    ) -> None:
        """To the pool now, or when ``not_before`` comes (a timer holds no thread)."""
        if launch.on_park is None:  # its body may park: this process then polls it
            launch.on_park = lambda: self.poll_parked(launch.project).wake()
        delay = None if not_before is None else not_before - self.config.clock()
        timer = None
        if delay is not None and delay > 0:
            timer = threading.Timer(delay, self._due, (job_id, launch, priority))
            timer.daemon = True
            with self._lock:  # a cancel already asked: to the pool now, its start lets it go
                if launch.cancel.is_set():
                    timer = None
                else:
                    self._timers[job_id] = timer
        if timer is None:
            self.backend.launch(self._start_and_run, (job_id, launch), {}, job_id, None, priority)
            return
        try:
            timer.start()
        except BaseException:
            with self._lock:
                self._timers.pop(job_id, None)
            raise

    def _due(self, job_id: str, launch: Launch, priority: int) -> None:
        with self._lock:  # whoever takes the timer out launches the job: this, or a cancel
            if self._timers.pop(job_id, None) is None:
                return
        self.backend.launch(self._start_and_run, (job_id, launch), {}, job_id, None, priority)

    def run_claimed(self, row: JobRow, launch: Launch) -> None:
        """Run a job a worker already claimed (the row is running, attempt bumped)."""
        job_id = row.record["job_id"]
        before = self._hold(job_id, launch)
        try:
            self._ensure_beater()
            self.backend.launch(self._run, (row, launch), {}, job_id)
        except BaseException:
            self._unhold(job_id, launch, before)
            raise

    def _hold(self, job_id: str, launch: Launch) -> Launch | None:
        """The job holds a slot here from now on; returns the launch of a run of
        the same id that was letting go (``_unhold`` puts it back)."""
        with self._lock:
            before = self._launches.get(job_id)
            self._launches[job_id] = launch
        return before

    def _unhold(self, job_id: str, launch: Launch, before: Launch | None) -> None:
        """Handing the job to the pool failed (a pool shut down, no thread to be
        had): it holds no slot, so ``busy`` and ``wait_idle`` do not count a job
        that will never run; the caller hears the error."""
        with self._lock:
            if self._launches.get(job_id) is launch:
                if before is None:
                    del self._launches[job_id]
                else:
                    self._launches[job_id] = before
            self._idle.notify_all()

    def _start_and_run(self, job_id: str, launch: Launch) -> ComputationResult:
        error = None
        waited = False
        while True:
            try:
                row = self.store.start(job_id, now=self.config.clock(), runner_id=self.runner_id)
            except Exception as exc:
                log.exception("job %s: could not be started", job_id)
                row, error = None, exc
            if not isinstance(row, NotYet):
                break
            # Delayed, or its key's limit is full: wait on this pool thread (the
            # limit is shared with workers, so no local queue could know better).
            waited = True
            pause = min(max(row.retry_at - self.config.clock(), 0.01), NOT_YET_POLL_S)
            if launch.cancel.wait(pause) or self._stop.is_set():
                row = None
                break
        if waited:
            self.learning.restart(job_id)  # its run time starts now, not at the wait
        if row is None:  # cancelled while it waited for a thread, or the store failed
            return ComputationResult(None, ComputationStatus.CANCELLED, error=error)
        return self._run(row, launch)

    def _run(self, row: JobRow, launch: Launch) -> ComputationResult:
        job_id = row.record["job_id"]
        try:
            return run_attempt(
                self.store,
                row,
                launch,
                self.config,
                hand_over=self._hand_over,
                keep=self.finishing.keep,
            )
        except Exception as exc:  # the store failed under the body: say so, loudly
            log.exception("job %s: could not record its outcome", job_id)
            return ComputationResult(None, ComputationStatus.FAILED, error=exc)

    def _release(self, job_id: str, launch: Launch | None = None) -> None:
        with self._lock:
            # A re-run of the same id may already hold the slot: only drop our own.
            if launch is None or self._launches.get(job_id) is launch:
                self._launches.pop(job_id, None)
            self._idle.notify_all()
        if self._on_release is not None:
            self._on_release(job_id)

    def poll_parked(
        self,
        project: Any,
        kinds_of: Callable[[], list[str]] | None = None,
        setup: Setup | None = None,
    ) -> Poller:
        """This process's poller of the store's parked jobs (of ``kinds_of()``:
        by default every kind registered here), started on first need."""
        with self._lock:
            if self.poller is None:
                self.poller = Poller(
                    self.store,
                    self.config,
                    project,
                    kinds_of or kinds.registered_kinds,
                    setup=setup,
                )
            return self.poller

    def held_jobs(self) -> list[str]:
        with self._lock:
            return list(self._launches)

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self._launches)

    def wait_idle(self, timeout: float | None = None) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: not self._launches, timeout=timeout)

    # ----- heartbeat -------------------------------------------------------------
    def _ensure_beater(self) -> None:
        beater = self._beater
        if beater is not None and beater.is_alive():  # the common case: no lock per job
            return
        with self._lock:
            if self._beater is None or not self._beater.is_alive():
                self._beater = threading.Thread(
                    target=self._beat_loop, name="nw-heartbeat", daemon=True
                )
                self._beater.start()

    def beat_once(self) -> None:
        with self._lock:
            running = {j: la for j, la in self._launches.items() if self.learning.is_running(j)}
        # a job whose outcome is kept beats on: no reaper may call it lost meanwhile
        finishing = [j for j in self.finishing.job_ids() if j not in running]
        now = self.config.clock()
        cancelled = self.store.beat([*running, *finishing], now=now, runner_id=self.runner_id)
        for job_id in cancelled:
            self.local_cancel(job_id)
        for job_id, launch in running.items():
            self._check_overdue(job_id, launch, now)

    def _check_overdue(self, job_id: str, launch: Launch, now: float) -> None:
        limit = launch.timeout_s or self.config.job_timeout_s
        started = self.learning.started.get(job_id)
        if launch.overdue or not limit or started is None:
            return
        if time.monotonic() - started <= limit:
            return
        launch.overdue = True
        log.warning("job %s has run past its time limit of %ss", job_id, limit)
        self.store.patch(job_id, {"overdue_at": now, "timeout_s": limit}, attempt=None)
        if launch.cancel_on_timeout or self.config.cancel_on_timeout:
            self.store.request_cancel(job_id, now=now)
            launch.cancel.set()

    def beat_worker(self, *, read_runners: bool = False) -> RunnersRead | None:
        """The process's own beat: alive, whatever it holds (the runners row).
        ``read_runners`` (for a worker's reaper): the same statement reads every
        runner, and that read is returned."""
        if not read_runners:
            self.store.beat([], now=self.config.clock(), runner_id=self.runner_id)
            return None
        beat = lambda now: self.store.beat_runner(self.runner_id, now=now)  # noqa: E731
        return RunnersRead.timed(beat, self.config)

    @property
    def _tick(self) -> float:
        return min(self.config.worker_beat_interval_s, self.config.heartbeat_interval_s)

    def beat_may_ride(self) -> bool:
        """Half the beat interval has passed since the runner's beat: a claim
        made now may carry the next one (``JobStore.claim_and_beat``)."""
        return time.monotonic() - self._beat_at >= self._tick / 2

    def rode(self, read: RunnersRead) -> None:
        """The runner's beat went with a claim (``read`` is what it read): the
        beat thread's next beat waits a whole interval from it, and the
        beat's listener hears it as it hears the beat thread's."""
        self._beat_at = read.asked
        self._beat_failing = False  # the store answered: the next failure is news
        on_beat = self.on_beat
        if on_beat is not None:
            try:
                on_beat(read)
            except Exception:
                log.exception("the beat's listener failed")

    def _beat_loop(self) -> None:
        # Two cadences on one thread: the process beat often (cheap, one row) so a
        # dead worker is found in seconds; each held job's beat at the seed's pace.
        # A beat that rode a claim (``rode``) counts: the next is an interval after it.
        last_jobs = time.monotonic()
        while not self._stop.is_set():
            on_beat, read = self.on_beat, None  # one value per round: it is set after start
            now = time.monotonic()
            rest, jobs_due = beat_rest(
                now,
                runner_due=self._beat_at + self._tick,
                jobs_due=last_jobs + self.config.heartbeat_interval_s,
            )
            if rest > 0:
                self._stop.wait(rest)
                continue
            self._beat_at = now
            try:
                if jobs_due:
                    last_jobs = now
                    self.beat_once()
                else:
                    read = self.beat_worker(read_runners=on_beat is not None)
                failed = self._beat_failing = False
            except Exception:
                if not self._beat_failing:  # once per outage, not once a second
                    log.exception("heartbeat failed")
                failed = self._beat_failing = True
            if on_beat is not None and not self._stop.is_set():
                try:  # None: the reaper reads the runners itself; False: the beat failed
                    on_beat(False if failed else read)
                except Exception:
                    log.exception("the beat's listener failed")

    def close(self, *, wait: bool = True) -> None:
        self._stop.set()
        if self.poller is not None:  # its look in hand ends first (a short one)
            self.poller.close()
        if self._steps is not None:  # its waiting steps end orphaned with this process
            self._steps.close()
        self.finishing.close()  # what is still kept stays in the journal for the next worker
        with self._lock:
            timers = list(self._timers.values())
        for timer in timers:  # delayed jobs not yet due stay queued in the store
            timer.cancel()
        self.backend.shutdown(wait=wait)
        try:
            self.store.unregister_runner(self.runner_id)
        except Exception:
            log.debug("could not unregister runner", exc_info=True)


def beat_rest(now: float, *, runner_due: float, jobs_due: float) -> tuple[float, bool]:
    """The beat thread's next step at ``now`` (monotonic), given when the
    runner's beat and the held jobs' beat fall due: ``(rest, jobs)``, how long
    to wait first (0: beat now) and whether this beat is the jobs' (which
    beats the runner too)."""
    if now >= jobs_due:
        return 0.0, True
    return max(min(runner_due, jobs_due) - now, 0.0), False
