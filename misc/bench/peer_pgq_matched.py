"""pgqueuer over asyncpg as a ``worker_peers.py`` peer, with nw-jobs' guarantees.

    cd ../shared/bench && PYTHONPATH=../../main/misc/bench "$V/bin/python" -B \\
        worker_peers.py --peers pgqueuer-asyncpg,peer_pgq_matched:Capped,\\
        peer_pgq_matched:Matched,peer_nwjobs:NwJobs --workers 1,2,4 --concurrency 10

Issue 13 asks nw-jobs to drain at least as fast as pgqueuer over asyncpg "at
matched concurrency", and forbids nw-jobs what makes pgqueuer fast there. The
harness runs ``pgqueuer.run(factory, batch_size=C)`` (its README's way); in
pgqueuer 1.6.0 that means (``pgqueuer/core/qm.py``, ``core/buffers.py``):

* ``batch_size`` is how many jobs one dequeue takes, not how many run: with
  ``max_concurrent_tasks=None`` every dequeued job starts at once as a task,
  and the worker dequeues again without waiting for them;
* a finished job's acknowledgement waits in a buffer, written when ``C`` of
  them have gathered or by a timer (0.1 s, jittered), while the worker goes on
  taking more jobs: a worker killed meanwhile loses the finishes of jobs that
  had returned, and they run again once their heartbeat is stale.

nw-jobs runs at most ``--max-concurrent`` bodies, and commits a body's finish
before that slot takes more work. These two peers are the same library and
driver as ``pgqueuer-asyncpg``, stepwise closer to that contract:

* ``Capped`` (``pgqueuer-capped``): at most C jobs picked at once
  (``max_concurrent_tasks=C``, which pgqueuer enforces in its dequeue query,
  and which must be at least twice the batch: ``batch_size=C // 2``);
  acknowledgements still buffered by pgqueuer's timer;
* ``Matched`` (``pgqueuer-matched``): that, and each job's acknowledgement
  written before its task ends (the buffer's ``add`` awaits a write that
  holds it), so no returned result waits on a timer; the acknowledgements
  that arrive while one is being written go together in the next write (a
  group commit, which the issue allows nw-jobs too).

Nothing else is changed: same schema, producer, entrypoints, logging and
uvloop as the harness's own pgqueuer peers.
"""

from __future__ import annotations

import sys
from pathlib import Path

from worker_peers import MODULE, PgQueuerAsyncpgPeer


class Capped(PgQueuerAsyncpgPeer):
    name = "pgqueuer-capped"
    matched = False

    @property
    def notes(self):
        return "pgqueuer-asyncpg with max_concurrent_tasks=C and batch_size=C//2" + (
            ", each acknowledgement written before its task ends" if self.matched else ""
        )

    def worker_argv(self, concurrency):
        return [
            sys.executable,
            str(Path(__file__).resolve()),
            self.factory,
            str(concurrency),
            "matched" if self.matched else "capped",
        ]


class Matched(Capped):
    name = "pgqueuer-matched"
    matched = True


def _durable_acks() -> None:
    """Each acknowledgement written before the task that adds it ends; the
    acknowledgements added while a write is in flight go together in the next
    one (a group commit, as nw-jobs' finishes, with no timer)."""
    import asyncio

    from pgqueuer.core import buffers

    async def add(self, item):
        waiting = self.__dict__.setdefault("_nw_waiting", [])
        done = asyncio.get_running_loop().create_future()
        waiting.append((item, done))
        async with self.lock:  # FIFO: whoever holds it writes everything queued
            if not done.done():
                batch = waiting[:]
                waiting.clear()
                try:
                    await self.flush_items([i for i, _ in batch])
                except Exception as exc:
                    for _, d in batch:
                        d.set_exception(exc)
                else:
                    for _, d in batch:
                        d.set_result(None)
        await done

    buffers.JobStatusLogBuffer.add = add


def main(factory: str, concurrency: str, how: str) -> None:
    """A worker, as the harness's ``_pgq_worker`` (its folder is on PYTHONPATH)."""
    import asyncio

    import pgqueuer
    from pgqueuer.core import logconfig

    harness = __import__(MODULE)
    if how == "matched":
        _durable_acks()
    logconfig.setup_fancy_logger(logconfig.LogLevel.INFO)
    c = int(concurrency)
    coro = pgqueuer.run(
        getattr(harness, factory), batch_size=max(c // 2, 1), max_concurrent_tasks=max(c, 2)
    )
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)


if __name__ == "__main__":
    main(*sys.argv[1:4])
