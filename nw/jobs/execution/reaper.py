"""Keeping a store reaped: the loop every worker process and ``nw-jobs serve`` run.

A dead worker's jobs must not wait for someone to read them: each worker
ticks a ``Reaper`` per project after each of its beats, on a thread of its
own (``BeatReaping``: a long reap must never hold up the worker's own beat,
by which the others judge it), and the web server runs ``ReaperThread`` over
the projects it serves. The decision is the one
liveness predicate (via ``recovery``); the writes are ``recovery.reap``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nw.jobs.core import liveness
from nw.jobs.core.model import JobsConfig
from nw.jobs.execution.recovery import reap_stale, workers_seen
from nw.jobs.stores.roles import Reaping

log = logging.getLogger("nw.jobs")


class Reaper:
    """Keeps one store reaped: every worker process and ``nw-jobs serve`` run one.

    ``tick`` is cheap when nothing died: one read of the runners table (in a
    worker, the read its own beat made: ``RunnersRead``, no statement of its
    own). Only
    when a worker is newly dead (silent past ``worker_stale_s``, or provably
    gone) does it scan the unfinished jobs for that worker's; a full scan
    runs every ``heartbeat_interval_s`` for jobs no announced worker holds.

    A worker's silence only counts while this reaper itself reached the store
    throughout (each read prompt, the reads close together): after an outage
    (a PostgreSQL restart, during which a read blocks in its retries) every
    beat is old, and the live workers must get one beat in before they are
    judged. Proof that a process is gone needs no such grace.

    Nor is any silence counted inside its **blind spells** (``WorkerSeen.blind``):
    from its last answer before a failed beat, a failed pass, a read that
    waited out an outage or one that came late (``worker_stale_s / 2`` after
    the last: a beat that waited it out and read nothing), to the next answer
    (and from its process's boot to its first answer). The job's own
    heartbeat is judged outside them too: a worker that could not write it
    during an outage this reaper lived through is not dead for that.
    """

    #: Blind spells remembered (the newest): silence spanning older ones is long.
    SPELLS_KEPT = 8

    def __init__(
        self,
        store: Reaping,
        config: JobsConfig,
        holds: Callable[[str], bool],
        *,
        started: float | None = None,
    ):
        """``started`` (the store's clock; default now): when its process began
        to reach for the store (a worker's boot, which may have waited out an
        outage): it is blind from then until its first read answers."""
        self.store, self.config, self.holds = store, config, holds
        self._blind: tuple[tuple[float, float], ...] = ()  # (start, end), the store's clock
        self._blind_since: float | None = config.clock() if started is None else started
        """Blind since then (the last answer before a failure), until a read answers."""
        self._last_answer: float | None = None  # the store's clock: the last read answered
        self._swept: set[tuple[str, float]] = set()  # (worker, last beat) already swept
        self._ok_since: float | None = None  # monotonic: the store answered since then
        self._last_read: float | None = None  # monotonic: when the last read returned
        self._last_full = float("-inf")
        self._failed_at: float | None = None  # monotonic: a beat failed then
        self._failed_lock = threading.Lock()  # never held for long (the beat thread takes it)
        self._lock = threading.Lock()  # a worker ticks at boot and on its reaping thread

    def unreachable(self, at: float | None = None) -> None:
        """The store failed a beat (at ``at``, monotonic; default now): silence
        counts again only after the reads have been prompt for
        ``worker_stale_s`` from then (never waits on a tick)."""
        with self._failed_lock:
            self._failed_at = time.monotonic() if at is None else at
            self._went_blind()

    def _went_blind(self) -> None:
        """A store call failed: blind since the last answer (spell not ended yet)."""
        if self._blind_since is None:
            self._blind_since = self._last_answer or self.config.clock()

    def tick(
        self, *, full: bool = False, read: RunnersRead | None = None, wait: bool = True
    ) -> list[str]:
        """One pass; the ids it reaped (requeued or closed). ``read``: the
        runners as a beat just read them (else this pass reads them). Without
        ``wait``, nothing is done while another thread is in a pass."""
        if not self._lock.acquire(blocking=wait):
            return []
        try:
            return self._tick(full, read or RunnersRead.of(self.store, self.config))
        except Exception:
            self._ok_since = None
            with self._failed_lock:
                self._went_blind()
            raise
        finally:
            self._lock.release()

    def _tick(self, full: bool, read: RunnersRead) -> list[str]:
        config, now, mono = self.config, read.now, read.answered
        slow = mono - read.asked > config.worker_beat_interval_s  # it waited out an outage
        late = self._last_read is None or mono - self._last_read > config.worker_stale_s / 2
        if self._ok_since is None or slow or late:
            self._ok_since = mono
        answered_at = now + (mono - read.asked)  # the store's clock, when it answered
        with self._failed_lock:
            failed_at, self._failed_at = self._failed_at, None
            if slow or late:  # the read waited out an outage, or none came for a while:
                self._went_blind()  # (a beat that waited it out and read nothing)
            if self._blind_since is not None:  # the spell ends with this answer
                spell = (min(self._blind_since, now), answered_at)
                self._blind = (*self._blind, spell)[-self.SPELLS_KEPT :]
                self._blind_since = None
            self._last_answer = answered_at
        workers = {
            rid: dataclasses.replace(w, blind=self._blind)
            for rid, w in workers_seen(self.store, read.rows).items()
        }
        if failed_at is not None:  # prompt reads count from the failure on, whatever this read
            self._ok_since = max(self._ok_since, failed_at)
        self._last_read = mono
        trusted = mono - self._ok_since >= config.worker_stale_s
        if not trusted:  # judge silence only once everyone had the time to beat again
            recent = now - config.worker_beat_interval_s
            workers = {
                rid: w if w.gone else dataclasses.replace(w, beat_at=max(w.beat_at, recent))
                for rid, w in workers.items()
            }
        if full or mono - self._last_full >= config.heartbeat_interval_s:
            self._last_full = mono
            return reap_stale(self.store, now, config, self.holds, workers)
        dead = {
            (rid, w.beat_at)
            for rid, w in workers.items()
            if not liveness.worker_alive(w, now, config)
        }
        # A dead worker stays announced (read as lost) for LOST_KEPT_S after its
        # last beat, so an operator sees what died; then its row goes.
        for rid, beat_at in dead:
            if now - beat_at > liveness.LOST_KEPT_S:
                self.store.unregister_runner(rid)
        fresh = dead - self._swept
        self._swept &= dead  # forget workers that beat again or were pruned
        if not fresh:
            return []
        self._swept |= fresh
        return reap_stale(self.store, now, config, self.holds, workers)


@dataclass(frozen=True)
class RunnersRead:
    """One read of the runners table and when it happened: ``asked`` and
    ``answered`` on the monotonic clock (a slow read waited out an outage),
    ``now`` on the store's clock when it was asked (the time it is judged at)."""

    rows: list[dict[str, Any]]
    asked: float
    answered: float
    now: float

    @classmethod
    def of(cls, store: Reaping, config: JobsConfig) -> RunnersRead:
        return cls.timed(lambda _now: store.runners(), config)

    @classmethod
    def timed(
        cls, read: Callable[[float], list[dict[str, Any]]], config: JobsConfig
    ) -> RunnersRead:
        """``read(now)``, timed."""
        now, asked = config.clock(), time.monotonic()
        rows = read(now)
        return cls(rows, asked, time.monotonic(), now)


class BeatReaping:
    """A worker's reaping, fed by its beats. The beat thread ``offer``s each
    read (or None: the reaper reads for itself) and goes straight on beating;
    this thread ticks each reaper with the newest read it was offered. A reap
    can take seconds (a dead worker's jobs, a store in retries): done on the
    beat thread it would silence this worker, and the others would reap it."""

    def __init__(self, tick: Callable[[Reaper, RunnersRead | None], object]):
        self._tick = tick
        self._offered: dict[Reaper, RunnersRead | None] = {}
        self._cond = threading.Condition()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="nw-reaper", daemon=True)
        self._thread.start()

    def offer(self, reaper: Reaper, read: RunnersRead | None) -> None:
        with self._cond:
            self._offered[reaper] = read  # a newer read replaces one not yet judged
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._offered or self._stop)
                if self._stop:
                    return
                offered, self._offered = self._offered, {}
            for reaper, read in offered.items():
                if self._stop:
                    return
                try:
                    self._tick(reaper, read)
                except Exception:  # the thread must outlive any one pass
                    log.exception("reaping %s failed", reaper.store)

    def close(self, timeout: float = 1.0) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout)


class ReaperThread:
    """Ticks a ``Reaper`` per project every ``worker_beat_interval_s`` until closed.

    ``stores`` is called each round and answers the stores that exist now, each
    with what this process holds of it (a project with no store yet is skipped,
    and picked up once it has one)."""

    def __init__(
        self,
        stores: Callable[[], Sequence[tuple[Reaping, Callable[[str], bool]]]],
        config: JobsConfig,
    ):
        self._stores, self.config = stores, config
        self._reapers: dict[int, Reaper] = {}
        self._stop = threading.Event()
        self._failing = False
        self._thread = threading.Thread(target=self._run, name="nw-reaper", daemon=True)

    def start(self) -> ReaperThread:
        self._thread.start()
        return self

    def tick(self) -> list[str]:
        reaped = []
        for store, held in self._stores():
            reaper = self._reapers.get(id(store))
            if reaper is None or reaper.store is not store:
                reaper = self._reapers[id(store)] = Reaper(store, self.config, held)
            reaped += reaper.tick()
        return reaped

    def _run(self) -> None:
        while not self._stop.wait(self.config.worker_beat_interval_s):
            try:
                reaped = self.tick()
                self._failing = False
            except Exception:
                if not self._failing:  # once per outage, not once a second
                    log.exception("reaping failed")
                self._failing = True
                continue
            if reaped:
                log.info("reaped %d job(s) whose worker was gone", len(reaped))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
