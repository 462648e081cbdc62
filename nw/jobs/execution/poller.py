"""Resuming parked jobs: a few threads per process look at every due parked job of its kinds.

One loop thread takes the due parked jobs of the process's kinds in batches
(``ParkedStore.look_parked``: each under a short lease, so any live process
of the kind may look at any parked job and a dead one's are looked at by the
next), and a small pool (``threads``) calls the kind's handlers on them:
``cancel_remote`` when a cancel was asked or the deadline passed, else
``on_webhook`` when the provider's webhook is kept for the job, else
``poll``. An answer of None or ``Pending`` puts the job back with its next
look backed off (``parked.next_poll_in``; every such answer of a batch in one
write); a result or an error ends the job as any body's would
(``outcome.decide``: the retry policy applies, and a retry finds ``resume``
set, so it re-attaches to the request). A thousand parked jobs cost these
threads and a query every ``TICK_S``, never a thread each.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any, cast

from au import ComputationStatus

from nw.canonical import jsonable
from nw.jobs.core import events, kinds, outcome, parked
from nw.jobs.core.errors import JobCancelled, JobRefused, error_kind_of
from nw.jobs.core.ids import check_json_params
from nw.jobs.core.model import ERROR_KIND_CANCELLED, ERROR_KIND_CRASHED, JobsConfig
from nw.jobs.core.storable import storable
from nw.jobs.stores.base import JobStore
from nw.jobs.stores.parking import Look, ParkedStore, Repark

log = logging.getLogger("nw.jobs")

TICK_S = 0.25
"""How often an idle poller asks the store for due parked jobs."""
BATCH = 64
"""Parked jobs taken per look."""
THREADS = 4
"""Threads that call the handlers (polls are network round trips)."""
TIMED_OUT = "timed out at the provider"
PRUNE_S = 60.0
"""How often a poller deletes the parked rows of jobs that ended."""

Setup = Callable[[str, Mapping[str, Any]], AbstractContextManager[Any]]
"""What a handler runs under (a worker's secrets bound as a body's are)."""


def parking_kinds(names: Sequence[str]) -> list[str]:
    """The kinds among ``names`` whose jobs may park (a poll or a webhook handler)."""
    out = []
    for name in names:
        spec = kinds.kind_spec(name)
        if spec is not None and spec.parks:
            out.append(name)
    return out


class Poller:
    """Looks after the parked jobs of one store's kinds in this process."""

    def __init__(
        self,
        store: JobStore,
        config: JobsConfig,
        project: Any,
        kinds_of: Callable[[], Sequence[str]],
        *,
        threads: int = THREADS,
        setup: Setup | None = None,
        tick_s: float = TICK_S,
        batch: int = BATCH,
    ):
        self.store = store
        self._parked = cast(ParkedStore, store)
        self.config = config
        self.project = project
        self._kinds_of = kinds_of
        self._setup = setup
        self._tick_s = tick_s
        self._batch = batch
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="nw-poll")
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._failing = False
        self.looks = 0
        self._learned: list[tuple[str, float]] = []
        self._learned_lock = threading.Lock()
        self._pruned_at = 0.0
        """Parked jobs looked at so far (tests, the bench)."""
        self._thread = threading.Thread(target=self._loop, name="nw-poller", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look now (a park, a webhook): not at the next tick."""
        self._wake.set()

    def close(self, *, wait: bool = True) -> None:
        self._stop.set()
        self._wake.set()
        if wait and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self._pool.shutdown(wait=wait, cancel_futures=not wait)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    # ----- the loop -------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            took = self.look_once()
            if took < self._batch:  # a full batch: more may be due at once
                self._wake.wait(self._tick_s)
                self._wake.clear()

    def look_once(self) -> int:
        """One look at the due parked jobs; how many were taken."""
        names = parking_kinds(self._kinds_of())
        if not names:
            return 0
        self._prune()
        now = self.config.clock()
        try:
            looks = self._parked.look_parked(
                names, now=now, look_s=parked.LOOK_S, limit=self._batch
            )
        except Exception:
            if not self._failing:  # once per outage
                log.exception("parked jobs: the look failed")
            self._failing = True
            return 0
        self._failing = False
        if not looks:
            return 0
        reparks = [r for r in self._pool.map(self._look_safely, looks) if r is not None]
        self.looks += len(looks)
        self._flush()
        if reparks:
            try:
                self._parked.repark(reparks, now=self.config.clock())
            except Exception:  # their leases lapse: the next look takes them again
                log.exception("parked jobs: %d could not be put back", len(reparks))
        return len(looks)

    def _look_safely(self, look: Look) -> Repark | None:
        try:
            return self._look(look)
        except Exception:  # its lease lapses and it is looked at again
            log.exception("parked job %s: the look failed", look.row.record.get("job_id"))
            return None

    # ----- one job ----------------------------------------------------------------
    def _look(self, look: Look) -> Repark | None:
        rec = look.row.record
        job_id, kind = rec["job_id"], rec.get("kind") or ""
        spec = kinds.kind_spec(kind)
        params = dict(rec.get("params") or {})
        info = rec.get(parked.PARKED_FIELD) or {}
        now = self.config.clock()
        if spec is None:  # not ours any more (unregistered meanwhile): later
            return Repark(job_id, look.attempt, now + parked.MAX_POLL_S)
        if rec.get("cancel_requested"):
            self._cancel_remote(spec, params, look)
            why = "cancelled at the provider"
            self._end(look, outcome.Ending(outcome.Ended.RAISED, now, ERROR_KIND_CANCELLED, why))
            return None
        if look.deadline_at is not None and now >= look.deadline_at:
            self._cancel_remote(spec, params, look)
            ending = outcome.Ending(outcome.Ended.RAISED, now, ERROR_KIND_CRASHED, TIMED_OUT)
            self._end(look, ending, final=True)
            return None
        webhook = look.webhook is not None and spec.on_webhook is not None
        try:
            with self._under(kind, params):
                if webhook:
                    assert spec.on_webhook is not None
                    answer = spec.on_webhook(self.project, params, look.request_id, look.webhook)
                elif spec.poll is not None:
                    answer = spec.poll(self.project, params, look.request_id)
                else:  # webhook only: wait for it (or the deadline)
                    answer = None
            if not (answer is None or isinstance(answer, parked.Pending)):
                check_json_params({"result": answer})
        except Exception as exc:
            self._end(look, _raised(exc, self.config.clock()))
            return None
        if answer is None or isinstance(answer, parked.Pending):
            fields = parked.pending_fields(info, answer, now=now)  # written with the put-back
            shown = None if fields is None else storable(fields[parked.PARKED_FIELD])[0]
            wait = parked.next_poll_in(
                look.polls + 1, webhook=bool(info.get("webhook")), pending=answer
            )
            due = now + wait
            if look.deadline_at is not None:
                due = min(due, look.deadline_at)
            return Repark(job_id, look.attempt, due, seen=look.seen, parked=shown)
        done = self.config.clock()
        fields = events.result_patch(rec, answer)
        self._end(look, outcome.Ending(outcome.Ended.RETURNED, done, fields=fields), answer)
        return None

    def _under(self, kind: str, params: Mapping[str, Any]) -> AbstractContextManager[Any]:
        return self._setup(kind, params) if self._setup is not None else nullcontext()

    def _cancel_remote(self, spec: kinds.KindSpec, params: dict[str, Any], look: Look) -> None:
        if spec.cancel_remote is None:
            return
        try:
            with self._under(spec.name, params):
                spec.cancel_remote(self.project, params, look.request_id)
        except Exception as exc:  # the job ends as asked; the provider's answer is logged
            log.warning(
                "job %s: cancel at the provider failed: %s",
                look.row.record.get("job_id"),
                type(exc).__name__,
            )

    def _end(
        self, look: Look, ending: outcome.Ending, value: Any = None, *, final: bool = False
    ) -> None:
        """The parked attempt ends as the outcome policy decides (``final``: never retried)."""
        rec = look.row.record
        job_id = rec["job_id"]
        policy = outcome.RetryPolicy.of(rec, self.config)
        if final:
            policy = dataclasses.replace(policy, retryable=False)
        cancel = bool(rec.get("cancel_requested"))
        decided = outcome.decide(ending, rec, policy, now=ending.at, cancel_requested=cancel)
        decided = dataclasses.replace(decided, fields={**decided.fields, parked.PARKED_FIELD: None})
        written = outcome.write_soon(self.store, job_id, look.attempt, decided, value).result()
        if not written:
            log.info("job %s: its parked attempt moved on; outcome not written", job_id)
        # its parked row is left to ``prune_parked``: no look takes an ended job's
        if written and decided.au_status is ComputationStatus.COMPLETED and not cancel:
            self._learn(rec, ending.at)
        log.info("job %s (parked): %s", job_id, decided.note)

    def _learn(self, rec: Mapping[str, Any], at: float) -> None:
        """The provider phase's time (park to result), under ``<key>:provider``
        (written once per look, for every job of it: ``_flush``)."""
        since = (rec.get(parked.PARKED_FIELD) or {}).get("since")
        if not isinstance(since, (int, float)) or rec.get("cached"):
            return
        specific = [k for k in rec.get("eta_candidates") or () if k != rec.get("output_kind")]
        with self._learned_lock:
            for key in parked.provider_keys(specific):
                self._learned.append((key, max(at - float(since), 0.0)))

    def _flush(self) -> None:
        with self._learned_lock:
            learned, self._learned = self._learned, []
        by_key: dict[str, list[float]] = {}
        for key, seconds in learned:
            by_key.setdefault(key, []).append(seconds)
        now = self.config.clock()
        try:  # a store call per sample of a key (``add_samples`` takes one per key)
            for n in range(max((len(v) for v in by_key.values()), default=0)):
                batch = {k: v[n] for k, v in by_key.items() if n < len(v)}
                self.store.add_samples(batch, now=now, window=self.config.sample_window_k)
        except Exception:
            log.exception("could not record the provider phase's duration")

    def _prune(self) -> None:
        """Parked rows of ended jobs, now and then (their look never takes them)."""
        now = self.config.clock()
        if now - self._pruned_at < PRUNE_S:
            return
        self._pruned_at = now
        try:
            self._parked.prune_parked(before=now - parked.LOOK_S)
        except Exception:
            log.debug("parked rows could not be pruned", exc_info=True)


def _raised(exc: BaseException, now: float) -> outcome.Ending:
    """A handler raised: as a body's raise reads (refused, cancelled, crashed)."""
    kind = error_kind_of(exc)
    fields: dict[str, Any] = {}
    if isinstance(exc, JobRefused):
        fields["error_detail"] = jsonable({"d": exc.detail})["d"]
    if isinstance(exc, (JobRefused, JobCancelled)):
        message = str(exc) or kind
    else:
        text = str(exc)
        message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return outcome.Ending(outcome.Ended.RAISED, now, kind, message, fields)
