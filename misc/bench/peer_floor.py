"""The floor: the least a Python worker with nw-jobs' guarantees can do, as a harness peer.

    cd ../shared/bench && PYTHONPATH=../../main/misc/bench "$V/bin/python" -B \\
        worker_peers.py --peers pgqueuer-asyncpg,peer_floor:Threads,peer_floor:Inline,\\
        peer_nwjobs:NwJobs --workers 1,2,4 --concurrency 10 --phases drain

Issue 13 asks nw-jobs to drain at least as fast as pgqueuer over asyncpg as the
shared harness runs it, while keeping two guarantees pgqueuer does not give
there (``peer_pgq_matched.py``): at most C jobs held by a worker, and a job's
finish committed before its slot takes more work. This peer asks how fast *any*
Python worker with those two guarantees drains on this machine, with nothing
else: no ETA, no cost, no attempt log, no limits, no reaper, no heartbeat, no
logging, no au status, one narrow table with one queue index, psycopg 3 with
prepared statements, and one statement per batch that commits the finishes of
the jobs that returned and claims the jobs that take their slots (nw-jobs'
``finish_many_and_claim``, stripped to the two updates):

* ``Threads`` (``floor-threads``): bodies are plain functions run on a pool of
  C threads, as nw-jobs runs them (a render's body blocks on its provider);
  the main thread writes each batch of finishes that gathered while the last
  statement was in flight (a group commit, no timer);
* ``Inline`` (``floor-inline``): the same statement, the bodies called one
  after the other on the main thread (the C claimed jobs run, then their
  finishes and the next C claims go in one statement): the cheapest Python
  there is, and nothing a product that runs blocking bodies could ship.

A worker is this file run as a script in the harness's folder:
``peer_floor.py threads|inline C`` (DSN from ``WORKER_PEERS_DSN``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

if __name__ == "__main__":  # a worker, started in the harness's folder
    sys.path.insert(0, os.getcwd())
from floor_sql import CLAIM, FINISH_AND_CLAIM, SCHEMA
from peer_nwjobs import NwJobs
from worker_peers import Peer, write_stamp


def run_body(kind: str, params: dict) -> None:
    if kind == "stamp":
        write_stamp(int(params["seq"]))


class Floor(Peer):
    dist = "psycopg"
    mode = "threads"
    finished_sql = "SELECT count(*) FROM floor_jobs WHERE status = 2"
    claimed_sql = "SELECT coalesce(sum(attempt), 0) FROM floor_jobs"
    window_sql = "SELECT min(started_at), max(finished_at) FROM floor_jobs WHERE status = 2"

    @property
    def name(self):
        return f"floor-{self.mode}"

    @property
    def notes(self):
        return (
            f"misc/bench/peer_floor.py {self.mode}: psycopg 3, one narrow table, at most C held,"
            " finishes committed with the claims that refill their slots"
        )

    def install(self, dsn, env):
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(SCHEMA)

    @contextlib.asynccontextmanager
    async def producer(self, dsn):
        import psycopg

        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)

        class P:
            batch = True

            async def enqueue_noops(self, k):
                async with conn.transaction():
                    await conn.execute(
                        "INSERT INTO floor_jobs (kind, params) SELECT 'noop',"
                        " jsonb_build_object('i', g) FROM generate_series(1, %s) g",
                        (k,),
                    )
                    await conn.execute("NOTIFY floor")

            async def enqueue_stamp(self, seq):
                async with conn.transaction():
                    await conn.execute(
                        "INSERT INTO floor_jobs (kind, params)"
                        " VALUES ('stamp', jsonb_build_object('seq', %s::int))",
                        (seq,),
                    )
                    await conn.execute("NOTIFY floor")

        try:
            yield P()
        finally:
            await conn.close()

    def worker_argv(self, concurrency):
        return [sys.executable, str(Path(__file__).resolve()), self.mode, str(concurrency)]


class Threads(Floor):
    mode = "threads"


class Inline(Floor):
    mode = "inline"


class NwStore(NwJobs):
    """``floor-nw-store``: the ``Threads`` loop over nw-jobs' own schema, producer
    and claim/finish statements (what nw-jobs' store costs, without its worker)."""

    name = "floor-nw-store"

    @property
    def notes(self):
        return "misc/bench/peer_floor.py threads over nw-jobs' PostgresJobStore statements"

    def worker_argv(self, concurrency):
        here = str(Path(__file__).resolve())
        return [sys.executable, here, "threads", str(concurrency), str(self.project_dir)]


def serve(mode: str, slots: int, project: str | None = None) -> None:
    import psycopg

    dsn = os.environ["WORKER_PEERS_DSN"]
    listen = psycopg.connect(dsn, autocommit=True)
    listen.execute("LISTEN floor" if project is None else f"LISTEN {_nw_channel(project)}")
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    claim, run = _nw_store(dsn, project) if project else _narrow(dsn)

    def idle() -> None:  # woken by an enqueue's NOTIFY, or a slow poll
        for _ in listen.notifies(timeout=0.5, stop_after=1):
            pass

    if mode == "inline":
        rows = claim(slots, [])
        while not stopping.is_set():
            for row in rows:
                run(row)
            rows = claim(slots, rows)
            if not rows:
                idle()
                rows = claim(slots, [])
        return

    pool = ThreadPoolExecutor(slots)
    finished: list = []
    returned = threading.Condition()

    def body(row) -> None:
        run(row)
        with returned:
            finished.append(row)
            returned.notify()

    held, first = 0, True
    while not stopping.is_set():
        with returned:
            if held and not finished:
                returned.wait(0.5)
            done, finished[:] = finished[:], []
        held -= len(done)
        if not held and not done and not first:
            idle()
        first = False
        rows = claim(slots - held, done)
        held += len(rows)
        for row in rows:
            pool.submit(body, row)
    pool.shutdown(wait=False)


def _narrow(dsn: str):
    """The floor's own table: ``claim(want, done rows) -> rows`` and ``run(row)``."""
    import psycopg

    conn = psycopg.connect(dsn, autocommit=True)
    runner = str(os.getpid())

    def claim(want: int, done: list[tuple]) -> list[tuple]:
        args = {"done": [row[0] for row in done], "runner": runner, "want": want}
        query = FINISH_AND_CLAIM if done else CLAIM
        return conn.execute(query, args, prepare=True).fetchall()

    return claim, lambda row: run_body(row[1], row[2])


def _nw_channel(project: str) -> str:
    from nw.jobs.stores.postgres import channel_for
    from nw.project import Project

    return channel_for(Project(project).project_id)


def _nw_store(dsn: str, project: str):
    """nw-jobs' own store and statements (``PostgresJobStore.claim`` and
    ``_finish_and_claim``, as a worker's refill sends them), driven by the
    floor's loop instead of nw-jobs' worker, runtime and group commit."""
    import socket
    import time

    from au import ComputationStatus

    from nw.jobs import JobsConfig
    from nw.jobs.stores import open_store
    from nw.jobs.stores.roles import Refill
    from nw.project import Project

    store = open_store(Project(project), JobsConfig(database_url=dsn), create=True)
    runner = f"floor:{os.getpid()}"
    store.register_runner(
        runner, {"host": socket.gethostname(), "pid": os.getpid()}, now=time.time()
    )
    kinds = ["noop", "stamp"]
    refill = Refill(
        kinds=lambda: kinds,
        runner_id=runner,
        want=lambda ids: 0,
        take=lambda rows, asked: None,
        clock=time.time,
    )

    def claim(want: int, done: list) -> list:
        if not done:
            return store.claim(kinds, now=time.time(), runner_id=runner, limit=want)
        items = [
            store._finish_item(
                row.record["job_id"],
                au_status=ComputationStatus.COMPLETED,
                result=None,
                error=None,
                fields={"finished_at": time.time()},
                attempt=row.record["attempt"],
            )
            for row in done
        ]
        if want <= 0:
            store._finish_alone(items)
            return []
        return store._finish_and_claim(items, refill, want)[1]

    return claim, lambda row: run_body(row.record["kind"], row.record.get("params") or {})


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), *sys.argv[3:])
