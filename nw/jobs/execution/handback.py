"""Giving a worker's jobs back to the queue: those its claims took though the
claim raised (``lost_claims``), and, at a shutdown, those whose body outlived
the grace period. Their attempt is not spent; what becomes of each (queued
again, or cancelled when a cancel was asked) is ``outcome.decide``'s."""

from __future__ import annotations

import logging

from nw.jobs.core import outcome
from nw.jobs.core.model import JobsConfig
from nw.jobs.core.records import JobRow
from nw.jobs.stores.base import JobStore

log = logging.getLogger("nw.jobs.worker")


def give_back(
    store: JobStore,
    row: JobRow,
    runner_id: str,
    config: JobsConfig,
    *,
    cancelled: bool,
    how: outcome.Ended,
) -> int:
    """Requeue a running job of ``runner_id``'s that none of its bodies runs
    now, its attempt not spent (``cancelled``: end it cancelled instead);
    ``how``: stopped (its body outlived the grace period) or never started (a
    lost claim took it). 1 if written; not its own any more (reaped and taken
    by another): 0."""
    if row.record.get("runner_id") != runner_id:
        return 0
    now = config.clock()
    decided = outcome.decide(
        outcome.Ending(how, now),
        row.record,
        outcome.RetryPolicy.of(row.record, config),
        now=now,
        cancel_requested=cancelled,
    )
    return int(outcome.write(store, row.record["job_id"], row.record["attempt"], decided))


def put_back_lost(store: JobStore, runner_id: str, config: JobsConfig) -> None:
    """Jobs the runner's claims took though they raised (``lost_claims``: the
    database went away after a claim or a refill committed): never launched,
    so they go back to the queue with their attempt given back (ended
    cancelled if a cancel was asked meanwhile), instead of sitting running
    until their heartbeat goes stale and being reaped as lost."""
    try:
        lost = store.lost_claims()
    except Exception:
        log.exception("reading what lost claims took on %s failed", store)
        return
    back = 0
    for row in lost:
        try:
            cancelled = bool(row.record.get("cancel_requested"))
            back += give_back(
                store, row, runner_id, config, cancelled=cancelled, how=outcome.Ended.UNSTARTED
            )
        except Exception:  # its lease is kept: the next beat tries again
            log.exception("job %s, taken by a lost claim: not put back", row.record["job_id"])
    if lost:
        log.warning("%d job(s) taken by claims whose answer was lost: %d put back", len(lost), back)
