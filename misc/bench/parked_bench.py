"""Parked provider renders at scale: 1,000 jobs on one worker with 4 slots.

    PYTHONPATH=. python misc/bench/parked_bench.py [--jobs 1000] [--takes 20]
        [--scenario poll|webhook|kill] [--database-url URL]

A local fake of fal's queue (``tests/fixtures/fake_fal.py``, its own process)
takes ``--takes`` seconds per request. One worker (``--max-concurrent 4``)
runs ``bench.fal`` (``nw.providers.fal`` against the fake). Printed:

* ``poll``: how long after the enqueue every job was submitted (parked), the
  worker's RSS growth over its idle size, its CPU (share of one core) while
  every job waits at the provider, and how long after the provider finished
  each job the job was seen finished (p50 / max), by polls alone.
* ``webhook``: the same with ``nw-jobs serve`` receiving fal's completion
  webhooks (``NW_JOBS_PUBLIC_URL``), the notice latency by webhook.
* ``kill`` / ``term``: ``--jobs`` (200) parked, the worker killed with
  SIGKILL (stopped with SIGTERM), a new one started: every job completes, and
  the fake counts one submit per job.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stats(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/_fake/stats", timeout=10) as answer:
        return json.loads(answer.read())


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def env_for(fake_url: str, public: str | None) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}:{ROOT / 'misc' / 'bench'}",
        "NW_FAL_QUEUE_URL": fake_url,
        "NW_SECRET_FAL": "fake-fal-key",
    }
    if public:
        env["NW_JOBS_PUBLIC_URL"] = public
    else:
        env.pop("NW_JOBS_PUBLIC_URL", None)
    return env


def worker(project: Path, env: dict, db: str | None) -> subprocess.Popen:
    args = [sys.executable, "-m", "nw.jobs.execution.worker", "--project", str(project)]
    args += ["--import", "parked_kinds", "--max-concurrent", "4", "--log-level", "WARNING"]
    if db:
        args += ["--database-url", db]
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--takes", type=float, default=20.0)
    parser.add_argument("--scenario", choices=("poll", "webhook", "kill", "term"), default="poll")
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    n = args.jobs or (200 if args.scenario in ("kill", "term") else 1000)
    sys.path[:0] = [str(ROOT), str(ROOT / "misc" / "bench")]
    import nw
    from nw import jobs
    from nw.jobs.core.model import JobsConfig

    __import__("parked_kinds")  # registers bench.fal in this process too

    cfg = JobsConfig(database_url=args.database_url)
    tmp = Path(tempfile.mkdtemp(prefix="parked-bench-"))
    project = nw.Project.init(tmp / "proj", title="parked bench")
    fake = subprocess.Popen(
        [sys.executable, "-m", "tests.fixtures.fake_fal", "--takes", str(args.takes)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert fake.stdout is not None
    fake_url = fake.stdout.readline().strip()
    serve = None
    public = None
    if args.scenario == "webhook":
        port = free_port()
        public = f"http://127.0.0.1:{port}"
        serve = subprocess.Popen(
            [sys.executable, "-m", "nw.cli", "serve", "--project", str(project.root),
             "--port", str(port), "--public-url", public,
             *(["--database-url", args.database_url] if args.database_url else [])],
            env=env_for(fake_url, public), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
    env = env_for(fake_url, public)
    w = worker(project.root, env, args.database_url)
    procs = [fake, w] + ([serve] if serve else [])
    try:
        time.sleep(2)  # the worker (and server) booted
        c0, w0 = cpu_s(w.pid), time.time()
        time.sleep(3)
        idle_rss = rss_mb(w.pid)
        idle = (cpu_s(w.pid) - c0) / (time.time() - w0)
        print(f"worker idle: {100 * idle:.1f}% of one core, RSS {idle_rss:.1f} MB")
        items = [("bench.fal", {"prompt": f"p{i}"}) for i in range(n)]
        t0 = time.time()
        jobs.enqueue_many(project, items, config=cfg)
        while stats(fake_url)["submits"] < n:
            time.sleep(0.05)
        submitted_s = time.time() - t0
        print(f"{n} jobs submitted (parked) {submitted_s:.2f} s after the enqueue")
        if args.scenario in ("kill", "term"):
            time.sleep(1)
            how = signal.SIGKILL if args.scenario == "kill" else signal.SIGTERM
            os.kill(w.pid, how)
            w.wait()
            print(f"worker stopped by {how.name} while every job was parked; a new one starts")
            w = worker(project.root, env, args.database_url)
            procs.append(w)
        else:
            # CPU while every job waits at the provider (none can finish yet)
            c0, w0 = cpu_s(w.pid), time.time()
            first_done = t0 + args.takes
            time.sleep(max(first_done - 2 - time.time(), 1.0))
            share = (cpu_s(w.pid) - c0) / (time.time() - w0)
            peak = rss_mb(w.pid)
            print(f"worker RSS {idle_rss:.1f} MB idle -> {peak:.1f} MB with {n} parked"
                  f" (+{peak - idle_rss:.1f} MB)")  # fmt: skip
            print(f"worker CPU while all wait: {100 * share:.1f}% of one core"
                  f" over {time.time() - w0:.1f} s")  # fmt: skip
        deadline = time.time() + args.takes + 120
        ended: dict[str, object] = {}
        while len(ended) < n and time.time() < deadline:
            for job in jobs.list_jobs(project, status="succeeded", limit=1000, config=cfg):
                ended.setdefault(job.job_id, job)
            for job in jobs.list_jobs(project, status="failed", limit=1000, config=cfg):
                ended.setdefault(job.job_id, job)
            time.sleep(0.5)
        ok = sum(1 for j in ended.values() if j.status == "succeeded")  # type: ignore[attr-defined]
        print(f"{ok} of {n} succeeded; fake counts {stats(fake_url)}")
        with urllib.request.urlopen(f"{fake_url}/_fake/done_at", timeout=10) as answer:
            done_at = json.loads(answer.read())
        lags = []
        for job in ended.values():
            url = ((job.result or {}).get("video") or {}).get("url", "")  # type: ignore[attr-defined]
            rid = url.rsplit("/", 1)[-1].removesuffix(".mp4")
            if rid in done_at and job.finished_at is not None:  # type: ignore[attr-defined]
                lags.append(job.finished_at.timestamp() - done_at[rid])  # type: ignore[attr-defined]
        if lags:
            lags.sort()
            p90 = lags[int(0.9 * (len(lags) - 1))]
            print(f"finish noticed after the provider's: p50 {statistics.median(lags):.2f} s,"
                  f" p90 {p90:.2f} s, max {lags[-1]:.2f} s")  # fmt: skip
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    print(f"load: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
