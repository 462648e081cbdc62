"""The embedded store's starts and claims: a job started by id, claims in
claim order under the file's write lock, and the limits that admit them
(``SqliteClaims``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from nw.jobs.core import limits
from nw.jobs.core.records import JobRow
from nw.jobs.stores.sqlite_base import Q, SqliteBase


class SqliteClaims(SqliteBase):
    """Starts and claims, each a new attempt, under the limits."""

    def _start_rows(
        self, c: sqlite3.Connection, ids: Sequence[str], now: float, runner_id: str
    ) -> list[JobRow]:
        """``ids`` started (one statement) and read back (one more), in order."""
        job_ids = json.dumps(list(ids))
        c.execute(Q["start_job"], {"job_ids": job_ids, "now": now, "runner_id": runner_id})
        got = {r["job_id"]: self._row(r) for r in c.execute(Q["get_many"], {"job_ids": job_ids})}
        return [got[job_id] for job_id in ids]  # each started just now, in this transaction

    def start(self, job_id: str, *, now: float, runner_id: str) -> JobRow | limits.NotYet | None:
        with self._cursor(write=True) as c:
            if not c.execute(Q["can_start"], {"job_id": job_id}).fetchone():
                return None
            info = c.execute(Q["job_limit"], {"job_id": job_id}).fetchone()
            not_before, key = info["not_before"], info["limit_key"]
            if isinstance(not_before, (int, float)) and not_before > now:
                return limits.NotYet(float(not_before), limits.delay_text(not_before - now))
            rooms = self._rooms(c, now)
            if key is not None and rooms.get(key, (None, []))[0] == 0:
                return limits.NotYet(now + 0.2, f"waiting: {key}")
            rows = self._start_rows(c, [job_id], now, runner_id)
            self._note_starts(c, rooms, [key], now)
            return rows[0]

    def _rooms(
        self, c: sqlite3.Connection, now: float
    ) -> dict[str, tuple[int | None, list[float]]]:
        """Each limited key's room now and its start log of the last second
        (read under the write lock: exact)."""
        out = {}
        for r in c.execute(Q["limit_rooms"]):
            log = [t for t in json.loads(r["starts"]) if t > now - limits.RATE_WINDOW_S]
            running = None if r["max_running"] is None else r["max_running"] - r["running"]
            rate = None if r["per_second"] is None else r["per_second"] - len(log)
            out[r["limit_key"]] = (limits.room(running, rate), log)
        return out

    def _note_starts(
        self,
        c: sqlite3.Connection,
        rooms: Mapping[str, tuple[int | None, list[float]]],
        keys: Sequence[str | None],
        now: float,
    ) -> None:
        started: dict[str, int] = {}
        for key in keys:
            if key is not None and key in rooms:
                started[key] = started.get(key, 0) + 1
        for key, n in started.items():
            log = rooms[key][1] + [now] * n
            c.execute(Q["note_starts"], {"key": key, "starts": json.dumps(log), "now": now})

    def claim(
        self, kinds: Sequence[str], *, now: float, runner_id: str, limit: int = 1
    ) -> list[JobRow]:
        """See ``JobStore.claim``: under the write lock, the limits' rooms are
        read once; candidates of full keys are passed over (their keys go in
        ``skip_keys`` and the next candidates are read)."""
        if not kinds or limit < 1:
            return []
        with self._cursor(write=True) as c:
            rooms = self._rooms(c, now)
            free = {key: room for key, (room, _) in rooms.items()}
            skip = sorted(key for key, room in free.items() if room == 0)
            ids: list[str] = []
            keys: list[str | None] = []
            for _round in range(limits.CLAIM_ROUNDS):
                want = int(limit) - len(ids)
                args = {
                    "now": now,
                    "kinds": json.dumps(list(kinds)),
                    "limit": want,
                    "skip_keys": json.dumps(skip),
                }
                cands = [(r["job_id"], r["limit_key"]) for r in c.execute(Q["claimable"], args)]
                admitted, full = limits.admit(cands, free)
                by_id = dict(cands)
                for job_id in admitted:
                    key = by_id[job_id]
                    if (room := free.get(key)) is not None:
                        free[key] = room - 1
                ids += admitted
                keys += [by_id[job_id] for job_id in admitted]
                if len(admitted) == len(cands) or len(ids) >= limit:
                    break
                skip = sorted(set(skip) | set(full))
            rows = self._start_rows(c, ids, now, runner_id) if ids else []
            self._note_starts(c, rooms, keys, now)
            return rows

    def set_limit(
        self, key: str, *, max_running: int | None, per_second: int | None, now: float
    ) -> None:
        args = {"key": key, "max_running": max_running, "per_second": per_second, "now": now}
        with self._cursor(write=True) as c:
            if max_running is None and per_second is None:
                c.execute(Q["delete_limit"], args)
            else:
                c.execute(Q["set_limit"], args)
