"""The PostgreSQL store's fenced writes: patches, finishes (alone, or
group-committed with a worker's next claims), requeues, cancel requests and
job heartbeats (``PgFinishes``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any

from au import ComputationStatus
from psycopg.types.json import Jsonb

from nw.jobs.core.errors import JobStoreError, JobStoreUnreachable
from nw.jobs.core.records import JobRow
from nw.jobs.core.status import CANCELLED_BEFORE_START
from nw.jobs.core.storable import clean_form, storable_fields
from nw.jobs.stores.base import (
    as_stored,
)
from nw.jobs.stores.columns import patch_values
from nw.jobs.stores.pg_base import Q, _dumps, _jsonb, log
from nw.jobs.stores.pg_claims import PgClaims
from nw.jobs.stores.pg_database import Conn, one
from nw.jobs.stores.roles import Refill, settled_error

_FORM = "_form"
"""A finish item's key for its JSON form (None: it is not JSON)."""


def _finish_entry(
    job_id: str,
    attempt: int | None,
    au_status: str,
    result: Any,
    error: str | None,
    fields: Mapping[str, Any],
) -> dict[str, Any]:
    """A finish as ``finish_many``'s ``batch`` reads it, with its JSON form
    (``_FORM``; a ``ValueError`` for a field that is not a record field)."""
    cols, doc = patch_values(fields)
    item = {
        "job_id": job_id,
        "attempt": attempt,
        "au_status": au_status,
        "value": result,
        "error": error,
        "cols": cols,
        "doc": doc,
    }
    try:
        item[_FORM] = _dumps(item)
    except (TypeError, ValueError, RecursionError):
        item[_FORM] = None
    return item


def _batch(items: list[dict[str, Any]]) -> Jsonb:
    """A batch of finish items as one ``jsonb`` parameter, from their forms."""
    return Jsonb(items, dumps=lambda batch: f"[{','.join(item[_FORM] for item in batch)}]")


class PgFinishes(PgClaims):
    """Writes fenced by the attempt, and the ends of attempts (a batch of
    finishes may carry the worker's next claims: ``PgClaims``)."""

    def patch(self, job_id: str, fields: Mapping[str, Any], *, attempt: int | None) -> bool:
        fields, _ = storable_fields(fields)
        args = {"job_id": job_id, "attempt": attempt, **self._patch_args(fields)}
        return self._exec("patch", args, lambda cur: cur.rowcount) > 0

    def finish(self, job_id: str, **finish: Any) -> bool:
        return self._finishes.wait(self.finish_soon(job_id, **finish))

    def finish_soon(self, job_id: str, **finish: Any) -> Future:
        """See ``JobStore.finish_soon``: the finish joins the group commit (a
        finish refused before, alone, is a settled future)."""
        try:
            item = self._finish_item(job_id, **finish)
        except Exception as exc:
            return settled_error(exc)
        return self._finishes.submit_soon(item)

    def _finish_item(
        self,
        job_id: str,
        *,
        au_status: ComputationStatus,
        result: Any,
        error: str | None,
        fields: Mapping[str, Any],
        attempt: int | None,
    ) -> dict[str, Any]:
        """A finish as the group commit batches it, with its JSON form
        (``_FORM``: encoded here, on the body's thread, not in the committer's
        statement); refused alone (read-only, not JSON). Its form holds
        nothing a store must replace (the common case): it is stored as it is,
        without asking ``as_stored`` part by part."""
        if self.read_only:
            raise JobStoreError("this job store was opened read-only")
        status = ComputationStatus(au_status).value
        item = _finish_entry(job_id, attempt, status, result, error, fields)
        if item[_FORM] is None or not clean_form(item[_FORM]):  # text to replace, or not JSON
            result, error, fields = as_stored(job_id, result, error, fields)
            item = _finish_entry(job_id, attempt, status, result, error, fields)
            if item[_FORM] is None:  # not JSON even so: refused alone, before it joins a batch
                _dumps(item)  # raises the encoder's error
        return item

    def _finish_many(self, items: list[dict[str, Any]]) -> list[Any]:
        """One statement for a batch of finishes (``_finish_alone``). With a
        worker's ``refill`` the batch also claims the jobs that take the
        finished ones' slots, in the same statement (``finish_many_and_claim``),
        and hands them over once it committed, before the finishes' futures
        resolve (so before their slots are let go); if that statement fails,
        the finishes are written alone first, then the claim is answered as not
        made."""
        refill = self.refill
        want = refill.want([item["job_id"] for item in items]) if refill is not None else 0
        if refill is None or want <= 0:
            return self._finish_alone(items)
        rows = None  # the claim's answer: None, the claim was not made
        try:
            done, rows = self._finish_and_claim(items, refill, want)
            return [item["job_id"] in done for item in items]
        except JobStoreUnreachable:
            raise
        except JobStoreError as exc:
            log.warning("finishing and claiming in one statement failed (%s); finishing", exc)
            return self._finish_alone(items)
        finally:
            refill.take(rows, want)

    def _finish_alone(self, items: list[dict[str, Any]]) -> list[Any]:
        """``finish_many``; on a database error other than an unreachable
        database, each item again alone (so one bad item fails alone)."""
        try:
            done = self._exec(
                "finish_many",
                {"batch": _batch(items), "job_ids": [item["job_id"] for item in items]},
                lambda cur: {r["job_id"] for r in cur.fetchall()},
            )
            return [item["job_id"] in done for item in items]
        except JobStoreUnreachable:
            raise
        except JobStoreError:
            if len(items) == 1:
                raise
        out: list[Any] = []
        for item in items:
            try:
                out.extend(self._finish_alone([item]))
            except JobStoreError as exc:
                out.append(exc)
        return out

    def _finish_and_claim(
        self, items: list[dict[str, Any]], refill: Refill, want: int
    ) -> tuple[set[str], list[JobRow]]:
        """``finish_many_and_claim``: the finishes commit with the claims of
        unlimited keys or not at all; the held jobs of limited keys are then
        started by ``_claim_limited`` after that commit, and keys found full
        passed over in further rounds, as ``claim`` does (``_claim_rounds``)."""
        finish = self._params(
            {"batch": _batch(items), "job_ids": [item["job_id"] for item in items]}
        )
        claim: dict[str, Any] = {
            "kinds": list(refill.kinds()),
            "now": refill.clock(),
            "runner_id": refill.runner_id,
            "limit": int(want),
            "lease": uuid.uuid4().hex,
        }
        params = {**finish, **claim}

        def op(conn: Conn, retried: bool) -> tuple[set[str], list[JobRow]]:
            if retried:  # the first try may have committed: its claims are ours by lease
                got = one(conn, Q["by_lease"], params).fetchall()
                if got:  # and its finishes committed with them: writing them again is a no-op
                    rows = one(conn, Q["finish_many"], finish).fetchall()
                    return {r["job_id"] for r in rows}, [self._row(r) for r in got]
            rows = one(conn, Q["finish_many_and_claim"], params).fetchall()
            done = set(rows[0]["finished"]) if rows else set()
            picked = [r for r in rows if r["job_id"] is not None]
            # the finishes are committed: the held keys' counts see them
            return done, self._claim_rounds(conn, params, int(want), first=picked)

        with self._losing(claim["lease"]):
            return self._write("finish_many_and_claim", op)

    def requeue(
        self, job_id: str, *, fields: Mapping[str, Any], not_before: float, attempt: int | None
    ) -> bool:
        _, _, fields = as_stored(job_id, None, None, fields)
        fields = {**fields, "started_at": None, "heartbeat_at": None}
        args = {
            "job_id": job_id,
            "attempt": attempt,
            "not_before": not_before,
            **self._patch_args(fields),
        }
        return self._exec("requeue", args, lambda cur: cur.fetchone()["requeued"]) > 0

    def request_cancel(self, job_id: str, *, now: float) -> JobRow | None:
        params = self._params({"job_id": job_id, "now": now, "doc": _jsonb(CANCELLED_BEFORE_START)})

        def op(conn: Conn, _retried: bool) -> JobRow | None:
            # Two statements, each committed as it runs: a process frozen between
            # them holds no lock (one explicit transaction would, until it thawed).
            one(conn, Q["request_cancel"], params)
            r = one(conn, Q["get"], params).fetchone()
            return None if r is None else self._row(r)

        return self._write("request_cancel", op)

    def beat(self, job_ids: Iterable[str], *, now: float, runner_id: str) -> set[str]:
        args = {"job_ids": list(job_ids), "now": now, "runner_id": runner_id}
        return self._exec("beat", args, lambda cur: {r["job_id"] for r in cur.fetchall()})
