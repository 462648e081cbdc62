"""The PostgreSQL store's claims: a job started by id, batched claims under
SKIP LOCKED (and folded with the runner's beat), claims a lost reply may
have committed, and the limits that admit them (``PgClaims``)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg

from nw.jobs.core import limits
from nw.jobs.core.errors import JobStoreError
from nw.jobs.core.records import JobRow
from nw.jobs.stores.pg_base import _BEAT_THEN_CLAIM, PgBase, Q
from nw.jobs.stores.pg_database import Conn, one


class PgClaims(PgBase):
    """Starts and claims, each a new attempt, under the limits."""

    def start(self, job_id: str, *, now: float, runner_id: str) -> JobRow | limits.NotYet | None:
        params = self._params(
            {"job_id": job_id, "now": now, "runner_id": runner_id, "lease": uuid.uuid4().hex}
        )

        def op(conn: Conn, retried: bool) -> JobRow | limits.NotYet | None:
            if retried:  # the first try may have committed before the connection died
                got = one(conn, Q["by_lease"], params).fetchall()
                if got:
                    return self._row(got[0])
            r = one(conn, Q["start"], {**params, "limited_ok": False}).fetchone()
            if r is not None:  # the common case: one statement
                return self._row(r)
            info = one(conn, Q["job_limit"], params).fetchone()
            if info is None or not info["startable"]:
                return None
            not_before = info["not_before"]
            if isinstance(not_before, (int, float)) and not_before > now:
                return limits.NotYet(float(not_before), limits.delay_text(not_before - now))
            if not info["limited"]:  # its limit was removed meanwhile: ask again
                return limits.NotYet(now, "")
            with conn.transaction():  # a limited key: as _claim_limited, for one job
                key = info["limit_key"]
                conn.execute(Q["lock_limits"], {"keys": [key]})
                free = self._rooms(conn, [key], now).get(key)
                if free is not None and free <= 0:
                    return limits.NotYet(now + 0.2, f"waiting: {key}")
                r = conn.execute(Q["start"], {**params, "limited_ok": True}).fetchone()
                if r is not None:
                    self._note_starts(conn, [key], now)
            return None if r is None else self._row(r)

        return self._write("start", op)

    def claim(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> list[JobRow]:
        """See ``JobStore.claim``. Jobs without a limited key start in the one
        ``claim`` statement; those with one come back held and are started by
        ``_claim_limited`` under their keys' row locks. A key found full is
        skipped in a next round (at most three), so its backlog holds no one up."""
        if not kinds or limit < 1:
            return []
        params = self._params(
            {
                "kinds": list(kinds),
                "now": now,
                "runner_id": runner_id,
                "lease": uuid.uuid4().hex,
            }
        )

        def op(conn: Conn, retried: bool) -> list[JobRow]:
            if retried:
                got = one(conn, Q["by_lease"], params).fetchall()
                if got:
                    return [self._row(r) for r in got]
            return self._claim_rounds(conn, params, int(limit))

        with self._losing(params["lease"]):
            return self._write("claim", op)

    def claim_and_beat(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> tuple[list[JobRow], list[dict[str, Any]] | None]:
        """See ``JobStore.claim_and_beat``: ``beat_runner`` and the claim's first
        round as one message of the simple query protocol (the parameters bound
        on the client): one round trip, one transaction that the server
        commits whatever the client does next; the rounds after it, if any, as
        ``claim``'s. Not prepared: a claim carries the beat at most twice a
        beat interval."""
        if not kinds or limit < 1:
            return [], None
        params = self._params(
            {"kinds": list(kinds), "now": now, "runner_id": runner_id, "lease": uuid.uuid4().hex}
        )
        first = {**params, "limit": int(limit), "skip_keys": []}

        def op(conn: Conn, retried: bool) -> tuple[list[JobRow], list | None]:
            if retried:  # the first try may have committed: its claims are ours by lease
                got = one(conn, Q["by_lease"], params).fetchall()
                if got:
                    return [self._row(r) for r in got], None
            cur = psycopg.ClientCursor(conn)
            cur.execute(_BEAT_THEN_CLAIM, first)
            runners = cur.fetchall()
            cur.nextset()
            rows = cur.fetchall()
            return self._claim_rounds(conn, params, int(limit), first=rows), runners

        with self._losing(params["lease"]):
            rows, runners = self._write("claim", op)
        return rows, None if runners is None else self._beaten(runners, runner_id, now)

    @contextlib.contextmanager
    def _losing(self, lease: str) -> Iterator[None]:
        """A claim under ``lease`` that raises may have committed (its answer
        lost past the retries, or a later round failing after the first):
        its lease is kept for ``lost_claims``."""
        try:
            yield
        except JobStoreError:
            with self._lost_lock:
                self._lost_leases.add(lease)
            raise

    def lost_claims(self) -> list[JobRow]:
        """See ``JobStore.lost_claims``: the unfinished rows under each kept
        lease; a lease is let go once nothing under it is unfinished (put
        back, which clears the lease, or never committed)."""
        with self._lost_lock:
            leases = list(self._lost_leases)
        rows = []
        for lease in leases:  # rare: one statement per lost claim
            taken = [self._row(r) for r in self._read("by_lease", {"lease": lease})]
            unfinished = [row for row in taken if row.record.get("finished_at") is None]
            if not unfinished:
                with self._lost_lock:
                    self._lost_leases.discard(lease)
            rows += unfinished
        return rows

    def _claim_rounds(
        self,
        conn: Conn,
        params: Mapping[str, Any],
        limit: int,
        first: list[Any] | None = None,
    ) -> list[JobRow]:
        """``claim``'s rounds: each claim statement starts the jobs of keys
        without a limit and returns the others held for ``_claim_limited``; a
        round that finds keys full is followed by one that passes over them.
        ``first``: the rows of a first round already run (a folded refill's)."""
        out: list[JobRow] = []
        skip: list[str] = []
        for _round in range(limits.CLAIM_ROUNDS):
            want = limit - len(out)
            if want <= 0:
                break
            if first is not None:
                rows, first = first, None
            else:
                args = {**params, "limit": want, "skip_keys": skip}
                rows = one(conn, Q["claim"], args).fetchall()
            out += [self._row(r) for r in rows if not r["held"]]
            held = [(r["job_id"], r["limit_key"]) for r in rows if r["held"]]
            if not held:
                break
            started, full = self._claim_limited(conn, params, held)
            out += started
            if not full or len(started) == len(held):
                break
            skip += full
        return out

    def _rooms(self, conn: Conn, keys: list[str], now: float) -> dict:
        rows = conn.execute(Q["limit_rooms"], {"keys": keys, "now": now}).fetchall()
        return {r["limit_key"]: limits.room(r["running_room"], r["rate_room"]) for r in rows}

    def _note_starts(self, conn: Conn, keys: list[str], now: float) -> None:
        counts: dict[str, int] = {}
        for key in keys:
            counts[key] = counts.get(key, 0) + 1
        args = {"keys": list(counts), "counts": list(counts.values()), "now": now}
        conn.execute(Q["note_starts"], args)

    def _claim_limited(
        self,
        conn: Conn,
        params: Mapping[str, Any],
        held: list[tuple[str, str]],
    ) -> tuple[list[JobRow], list[str]]:
        """Start what the limits allow of these held jobs, in one transaction:
        lock the keys' limit rows (key order), count each key's room in a new
        statement (its snapshot sees every start committed before the lock was
        granted), start the admitted jobs, log their starts. Returns the rows
        started and the keys found full."""
        now = params["now"]
        keys = sorted({key for _, key in held})
        with conn.transaction():
            conn.execute(Q["lock_limits"], {"keys": keys})
            admitted, full = limits.admit(held, self._rooms(conn, keys, now))
            if not admitted:
                return [], full
            rows = conn.execute(Q["start_ids"], {**params, "job_ids": admitted}).fetchall()
            self._note_starts(conn, [r["limit_key"] for r in rows], now)
        return [self._row(r) for r in rows], full

    def set_limit(
        self, key: str, *, max_running: int | None, per_second: int | None, now: float
    ) -> None:
        if max_running is None and per_second is None:
            self._exec("delete_limit", {"key": key})
        else:
            args = {"key": key, "max_running": max_running, "per_second": per_second, "now": now}
            self._exec("set_limit", args)
