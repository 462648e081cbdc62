"""``jobs.wait`` and ``nw.jobs.aio`` figures, on both stores. Prints; asserts nothing.

wake: one worker process runs short jobs one at a time; this process waits
for each with ``jobs.wait``. The figure is how long after the worker stamped
the job finished (``finished_at``, before its commit; same host, same clock)
the waiter returned it: the commit, the signal and the read together.

loop lag: one Starlette app, served by uvicorn in this process, answers
``POST /render`` with ``aio.enqueue`` then ``aio.get_job`` (the shape of a
thin ``/api/jobs`` route); ``--clients`` concurrent clients (httpx, in
another process) send ``--requests`` in all, while a ticker on the app's
loop asks to sleep 5 ms and records how late it woke.

    PYTHONPATH=. python misc/bench/wait_bench.py [--database-url URL]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nw
from nw import jobs
from nw.jobs import aio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_bodies import start_workers, stop_workers  # noqa: E402  (registers bench.noop)


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def wake(base: Path, cfg: jobs.JobsConfig, rounds: int) -> list[float]:
    project = nw.Project.init(base / "wake")
    warm = jobs.enqueue(project, "bench.noop", {"i": -1}, config=cfg)
    env_url = {"NW_JOBS_DATABASE_URL": cfg.database_url} if cfg.database_url else {}
    os.environ.update(env_url)
    procs = start_workers(project, 1, ["--max-concurrent", "1"])
    try:
        jobs.wait(project, warm.job_id, timeout=60, config=cfg)
        late = []
        for i in range(rounds):
            job = jobs.enqueue(project, "bench.noop", {"i": i}, config=cfg)
            done = jobs.wait(project, job.job_id, timeout=60, config=cfg)
            back = time.time()
            late.append((back - done.finished_at.timestamp()) * 1000)
        return late
    finally:
        stop_workers(procs)
        for name in env_url:
            os.environ.pop(name, None)


LOAD = """
import asyncio, sys, httpx
url, clients, requests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
async def main():
    todo = iter(range(requests))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=60) as client:
        async def one():
            for i in todo:
                answer = await client.post("/render", json={"i": i})
                assert answer.status_code == 202, answer.text
        await asyncio.gather(*(one() for _ in range(clients)))
asyncio.run(main())
"""


def loop_lag(base: Path, cfg: jobs.JobsConfig, clients: int, requests: int):
    """The app served by uvicorn on a thread of this process (its own loop);
    the clients in another process, so the loop measured runs the app alone."""
    import socket
    import subprocess
    import threading

    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    project = nw.Project.init(base / f"lag-{clients}")
    lags: list[tuple[float, float]] = []

    async def render(request):
        body = await request.json()
        job = await aio.enqueue(project, "bench.noop", body, config=cfg)
        seen = await aio.get_job(project, job.job_id, config=cfg)
        return JSONResponse(jobs.to_dict(seen), status_code=202)

    async def ticker():
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append((asked, (time.perf_counter() - asked - 0.005) * 1000))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        tick = asyncio.create_task(ticker())
        yield
        tick.cancel()

    app = Starlette(routes=[Route("/render", render, methods=["POST"])], lifespan=lifespan)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", backlog=2048))
    thread = threading.Thread(target=lambda: asyncio.run(server.serve(sockets=[sock])))
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        began = time.perf_counter()
        cmd = [sys.executable, "-c", LOAD, url, str(clients), str(requests)]
        subprocess.run(cmd, check=True)
        spent = time.perf_counter() - began
    finally:
        server.should_exit = True
        thread.join()
    during = [lag for at, lag in lags if began <= at <= began + spent]
    return during, requests / spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", default=os.environ.get("NW_TEST_DATABASE_URL"))
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args(argv)
    stores = [("embedded", jobs.JobsConfig())]
    if args.database_url:
        stores.append(("postgresql", jobs.JobsConfig(database_url=args.database_url)))
    print(f"wait_bench {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    for name, cfg in stores:
        with tempfile.TemporaryDirectory(prefix="nw-wait-") as tmp:
            late = wake(Path(tmp), cfg, args.rounds)
            print(
                f"{name:10} wake after finish, ms: p50 {statistics.median(late):.1f}"
                f"  p99 {pct(late, 99):.1f}  max {max(late):.1f}  ({len(late)} jobs)"
            )
            lags, rate = loop_lag(Path(tmp), cfg, args.clients, args.requests)
            print(
                f"{name:10} loop lag under {args.clients} clients, ms: p50 "
                f"{statistics.median(lags):.2f}  p99 {pct(lags, 99):.2f}  max {max(lags):.2f}"
                f"  ({rate:.0f} enqueue+get_job/s, {len(lags)} ticks)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
