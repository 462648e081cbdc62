"""Web figures (issue 15): pollers and open trays on one ``nw-jobs serve``. Prints; asserts nothing.

    PYTHONPATH=. python misc/bench/web_bench.py [--before DIR] [--jobs 5000] [--trays 200]

A project of ``--jobs`` finished jobs (four kinds, three actors, one in seven
failed) is served by a real ``nw-jobs serve`` on a loopback port. The load is
raw HTTP/1.1 from one asyncio process (no client library in the way):

1. ``--pollers`` clients each send ``GET /api/jobs?limit=50`` back to back on a
   kept-alive connection for ``--seconds``: requests per second, p50, p99, errors.
   Then again with a query no one asked before on every request (an ignored
   ``n=`` parameter), so no kept answer serves it: the cost of a page itself.
2. ``--trays`` event streams (``/api/summary/events``, what an open tray holds)
   are opened; with nothing happening, the server's CPU is read from
   ``/proc/<pid>/stat`` over ``--idle-seconds`` (percent of one core).
3. With the trays open, a writer process enqueues one instant job a second
   while the pollers run again (same page, then a new page each): their
   figures, and for each new job how long until every tray's stream carried
   its id (the worst tray per job).

``--before DIR``: run the same bench against another checkout (its ``nw``
package serves, populates and writes; e.g. ``git archive <commit> | tar -x -C
DIR``) and print the two side by side. Each checkout populates its own project.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
TICKS = os.sysconf("SC_CLK_TCK")


# ----- helpers run inside the checkout under test (subprocesses) ---------------------------
def populate(root: str, n: int) -> None:
    from nw import Project
    from nw.jobs import enqueue
    from nw.jobs.execution.runtimes import shutdown_runtimes

    project = Project(root)

    def body(project, params, *, on_event, should_cancel):
        on_event({"fraction": 0.5, "current_transform": "render"})
        if params["i"] % 7 == 0:
            raise RuntimeError("the model timed out")
        return {"frames": params["i"] % 90}

    import logging

    logging.getLogger("nw.jobs").setLevel(logging.CRITICAL)  # the failures are on purpose
    for i in range(n):
        kind = f"bench.kind{i % 4}"
        enqueue(
            project,
            kind,
            {"title": f"Panel {i}", "i": i, "model": "bench", "operation": "render"},
            actor=f"user{i % 3}",
            dispatch={kind: body},
        )
    shutdown_runtimes()


def write(root: str, every_s: float, count: int) -> None:
    """Enqueue ``count`` instant jobs, one per ``every_s``; print ``job_id wall_time`` each."""
    from nw import Project
    from nw.jobs import enqueue
    from nw.jobs.execution.runtimes import shutdown_runtimes

    project = Project(root)

    def body(project, params, *, on_event, should_cancel):
        return {"ok": True}

    for i in range(count):
        at = time.time()
        job = enqueue(
            project, "bench.change", {"title": f"Change {i}"}, dispatch={"bench.change": body}
        )
        print(job.job_id, at, flush=True)
        time.sleep(every_s)
    shutdown_runtimes()


# ----- the load ----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


async def get(reader, writer, port: int, path: str) -> tuple[int, bytes]:
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    body = await reader.readexactly(int(length.group(1))) if length else b""
    return status, body


async def poll(port: int, until: float, lat: list[float], errors: list[str], bust: bool) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        while time.monotonic() < until:
            t = time.perf_counter()
            # bust: a query no one asked before (an ignored parameter), so no kept
            # answer can serve it: what reading, projecting and encoding a page costs.
            path = f"/api/jobs?limit=50&n={len(lat)}-{id(writer)}" if bust else "/api/jobs?limit=50"
            try:
                status, _ = await get(reader, writer, port, path)
            except (OSError, asyncio.IncompleteReadError) as exc:
                errors.append(repr(exc))
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            if status != 200:
                errors.append(str(status))
            lat.append(time.perf_counter() - t)
    finally:
        writer.close()


async def pollers(port: int, n: int, seconds: float, *, bust: bool = False) -> dict:
    lat: list[float] = []
    errors: list[str] = []
    until = time.monotonic() + seconds
    await asyncio.gather(*(poll(port, until, lat, errors, bust) for _ in range(n)))
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [float("nan")] * 99
    return {
        "req_s": len(lat) / seconds,
        "p50_ms": q[49] * 1000,
        "p99_ms": q[98] * 1000,
        "errors": len(errors),
    }


class Tray:
    """One open event stream; records when each watched job id first shows up in it."""

    def __init__(self, port: int):
        self.port = port
        self.seen: dict[str, float] = {}
        self.watch: set[str] = set()
        self.opened = asyncio.Event()
        self.failed: str | None = None
        self.tail = b""

    async def run(self, stop: asyncio.Event) -> None:
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
            writer.write(
                f"GET /api/summary/events HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if b" 200 " not in head.split(b"\r\n", 1)[0]:
                raise RuntimeError(head.split(b"\r\n", 1)[0].decode())
        except Exception as exc:  # a bench reports what broke
            self.failed = repr(exc)
            self.opened.set()
            return
        try:
            while not stop.is_set():
                read = asyncio.ensure_future(reader.read(1 << 16))
                halt = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait({read, halt}, return_when=asyncio.FIRST_COMPLETED)
                if read not in done:
                    read.cancel()
                    break
                halt.cancel()
                chunk = read.result()
                if not chunk:  # the server ended the stream; a browser would reconnect
                    self.failed = "stream ended"
                    break
                now = time.time()
                text = self.tail + chunk
                if b"data:" in text:
                    self.opened.set()
                for job_id in self.watch:
                    if job_id not in self.seen and job_id.encode() in text:
                        self.seen[job_id] = now
                self.tail = text[-80:]
        finally:
            writer.close()


async def measure(port: int, pid: int, args, root: str, env: dict) -> dict:
    out: dict = {}
    out["pollers alone"] = await pollers(port, args.pollers, args.seconds)
    out["pollers alone, a new page each"] = await pollers(
        port, args.pollers, args.seconds, bust=True
    )
    stop = asyncio.Event()
    trays = [Tray(port) for _ in range(args.trays)]
    tasks = [asyncio.ensure_future(t.run(stop)) for t in trays]
    await asyncio.wait_for(asyncio.gather(*(t.opened.wait() for t in trays)), 120)
    out["trays open"] = sum(1 for t in trays if t.failed is None)
    await asyncio.sleep(2)  # let the first events settle
    before, t0 = cpu_ticks(pid), time.monotonic()
    await asyncio.sleep(args.idle_seconds)
    out["idle cpu %"] = (cpu_ticks(pid) - before) / TICKS / (time.monotonic() - t0) * 100
    count = max(int(2 * args.seconds), 1)  # a change a second through both poller phases
    writer = await asyncio.create_subprocess_exec(
        sys.executable, str(HERE), "--write", root, str(count),
        stdout=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    written: dict[str, float] = {}

    async def read_writer():
        async for line in writer.stdout:
            job_id, at = line.decode().split()
            for t in trays:
                t.watch.add(job_id)
            written[job_id] = float(at)

    reading = asyncio.ensure_future(read_writer())
    phase_a = time.time()
    out["pollers + trays + changes"] = await pollers(port, args.pollers, args.seconds)
    phase_b = time.time()
    out["same, a new page each"] = await pollers(port, args.pollers, args.seconds, bust=True)
    await writer.wait()
    await reading
    await asyncio.sleep(3)  # the last change's deadline
    worst: dict[str, list[float]] = {"same page": [], "new page each": []}
    missed = 0
    for job_id, at in written.items():
        delays = [t.seen[job_id] - at for t in trays if t.failed is None and job_id in t.seen]
        missed += sum(1 for t in trays if t.failed is None and job_id not in t.seen)
        if delays and at >= phase_a:
            worst["same page" if at < phase_b else "new page each"].append(max(delays))
    out["changes"] = len(written)
    for phase, delays in worst.items():
        out[f"worst tray delay s, {phase} (median, max)"] = (
            (statistics.median(delays), max(delays)) if delays else (float("nan"),) * 2
        )
    out["tray misses (within 3 s)"] = missed
    out["trays failed"] = sum(1 for t in trays if t.failed is not None)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return out


def run_checkout(checkout: Path, args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="nw-webbench-"))
    root = work / "project"
    root.mkdir()
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("NW_JOBS_DATABASE_URL", None)
    print(f"[{checkout}] populating {args.jobs} jobs…", file=sys.stderr, flush=True)
    subprocess.run(
        [sys.executable, str(HERE), "--populate", str(root), str(args.jobs)], env=env, check=True
    )
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", "from nw.cli import main; raise SystemExit(main())", "serve",
         "--project", str(root), "--port", str(port)],
        env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError as exc:
                if server.poll() is not None or time.monotonic() > deadline:
                    why = server.stderr.read().decode()
                    raise SystemExit(f"serve did not start: {why}") from exc
                time.sleep(0.1)
        print(f"[{checkout}] measuring…", file=sys.stderr, flush=True)
        return asyncio.run(measure(port, server.pid, args, str(root), env))
    finally:
        server.terminate()
        server.wait(10)


def fmt(value) -> str:
    if isinstance(value, dict):
        return (
            f"{value['req_s']:.0f} req/s, p50 {value['p50_ms']:.0f} ms, "
            f"p99 {value['p99_ms']:.0f} ms, {value['errors']} errors"
        )
    if isinstance(value, tuple):
        return " / ".join(f"{v:.2f}" for v in value)
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--populate":
        return populate(sys.argv[2], int(sys.argv[3]))
    if len(sys.argv) > 1 and sys.argv[1] == "--write":
        return write(sys.argv[2], 1.0, int(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, help="a checkout to compare against")
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--trays", type=int, default=200)
    parser.add_argument("--pollers", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    args = parser.parse_args()
    runs = {}
    if args.before:
        runs["before"] = run_checkout(args.before.resolve(), args)
    runs["this checkout"] = run_checkout(ROOT, args)
    print(
        f"\nweb bench: {args.jobs} jobs, {args.pollers} pollers of GET /api/jobs?limit=50, "
        f"{args.trays} trays, {args.seconds:.0f} s per phase, {os.cpu_count()} cores\n"
    )
    names = list(runs)
    width = max(len(k) for k in runs[names[0]])
    print(" | ".join([" " * width, *(f"{n:<48}" for n in names)]))
    for key in runs[names[0]]:
        print(" | ".join([f"{key:<{width}}", *(f"{fmt(runs[n][key]):<48}" for n in names)]))
    print(json.dumps(runs, default=str), file=sys.stderr)


if __name__ == "__main__":
    main()
