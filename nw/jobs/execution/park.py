"""A body returned ``Submitted``: record the park and let the attempt's slot go.

Called by ``body.run_attempt`` on the body's thread. The job stays running,
its record says what it waits on (``parked``) and how a retry re-attaches
(``resume``); its poll schedule goes in the store's ``parked`` table, fenced
by the attempt. From then on no thread of this process holds the job: a
poller of any live process of its kind resumes it (``poller.Poller``), and
the reaper leaves it be (``liveness.should_reap``).
"""

from __future__ import annotations

import logging
from typing import Any

from au import ComputationResult, ComputationStatus

from nw.errors import InvalidValue
from nw.jobs.core import eta, kinds, parked
from nw.jobs.core.model import JobsConfig
from nw.jobs.stores.parking import Park
from nw.jobs.stores.roles import WorkerStore

log = logging.getLogger("nw.jobs")


def learned_provider_s(
    store: WorkerStore, record: dict[str, Any], config: JobsConfig
) -> float | None:
    """The provider phase's learned median for the job's ETA keys (None: not learned yet)."""
    specific = [k for k in record.get("eta_candidates") or () if k != record.get("output_kind")]
    keys = parked.provider_keys(specific)
    if not keys:
        return None
    samples = store.samples(keys, window=config.sample_window_k)
    for key in keys:
        found = samples.get(key) or []
        if len(found) >= config.n_min:
            return eta.sample_percentiles(found, config)[0]
    return None


def park_attempt(
    store: WorkerStore,
    record: dict[str, Any],
    submitted: parked.Submitted,
    *,
    webhook: bool,
    config: JobsConfig,
) -> ComputationResult:
    """Park the attempt ``record`` is on; what au's middleware sees (running: nothing learned)."""
    kind = record.get("kind") or ""
    spec = kinds.kind_spec(kind)
    if spec is None or not spec.parks:
        raise InvalidValue(
            f"kind {kind!r} returned Submitted but registers no poll= or on_webhook= to resume"
            " it (register_kind(..., poll=fn))"
        )
    job_id, attempt = record["job_id"], record["attempt"]
    now = config.clock()
    fields = parked.park_fields(submitted, now=now, webhook=webhook)
    learned = learned_provider_s(store, record, config)
    if learned is not None:
        fields[parked.PARKED_FIELD]["eta_at"] = round(now + learned, 1)
        fields[parked.PARKED_FIELD]["provider_s"] = round(learned, 3)
    deadline = fields[parked.PARKED_FIELD]["deadline_at"]
    due = now + parked.next_poll_in(0, webhook=webhook)
    if deadline is not None:
        due = min(due, deadline)
    done = store.park(
        Park(job_id, attempt, kind, submitted.request_id, due, deadline, fields), now=now
    )
    if done:
        log.debug("job %s parked on %s (%s)", job_id, submitted.provider, submitted.request_id)
    else:
        log.warning("job %s: attempt %s moved on before its park was recorded", job_id, attempt)
    return ComputationResult(None, ComputationStatus.RUNNING, metadata={"parked": done})
