"""nw-jobs against other peers of the shared harness, in alternating rounds.

    cd ../shared/bench && PYTHONPATH=../../main/misc/bench "$V/bin/python" -B \\
        ../../main/misc/bench/peer_rounds.py --rounds 6 --workers 1,2 \\
        --peers pgqueuer-asyncpg,peer_pgq_matched:Capped,peer_nwjobs:NwJobs

One harness run measures its peers one after the other, over minutes in which
this shared machine's speed moves by tens of percent (a run of 2026-12-03
saw one peer's drain in a slow minute and another's in a fast one: the
pgbench ceiling of neighbouring runs went from 1,206 to 2,781 tps). This
runs the harness's drain phase (``--phases drain,latency`` adds the
enqueue-to-start phase) ``--rounds`` times, the peers' order reversed every
other round, and prints each figure of every peer in every round (the drain
for each worker count, the latency's p50) and the last peer's figure over
each other peer's, per round and as the median: a ratio taken within
minutes, in both orders.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

DRAIN = "drain, {} worker(s), jobs/s from their start"
LATENCY = "enqueue-to-start p50, ms (a ratio below 1: the last peer starts sooner)"


def one_round(args: argparse.Namespace, peers: list[str], out: Path) -> dict:
    """Each peer's figures in one harness run: {name: {figure: value}}; a peer
    that failed or was skipped there has none (its reason goes to stderr)."""
    cmd = [
        sys.executable, "-B", "worker_peers.py", "--db", args.db, "--peers", ",".join(peers),
        "--workers", args.workers, "--phases", args.phases, "--concurrency",
        str(args.concurrency), "--n", str(args.n), "--json", str(out),
    ]  # fmt: skip
    if args.dsn:  # else the harness's own default (WORKER_PEERS_ADMIN_DSN, then its own)
        cmd += ["--dsn", args.dsn]
    ran = subprocess.run(cmd, stdout=subprocess.DEVNULL)
    if ran.returncode:
        sys.exit(f"peer_rounds.py: the harness exited {ran.returncode} (its errors are above)")
    figures: dict = {}
    for name, got in json.loads(out.read_text())["peers"].items():
        mine = figures[name] = {}
        if "error" in got or "skipped" in got:
            print(f"  {name}: {got.get('error') or got.get('skipped')}", file=sys.stderr)
            continue
        for d in got.get("drain", []):
            mine[DRAIN.format(d["workers"])] = d.get("drain_jobs_per_s")
        if "latency" in got:
            mine[LATENCY] = got["latency"].get("p50_ms")
    return figures


def report(rounds: list[dict]) -> None:
    """Every figure round by round, and the last peer's over each other peer's
    (per round, and the median over the rounds where both have it)."""
    names = list(rounds[0])
    ours = names[-1]  # the first round runs the peers in the order given
    figures = list(dict.fromkeys(f for r in rounds for mine in r.values() for f in mine))
    for figure in figures:
        shown = "{:>10.2f}" if figure == LATENCY else "{:>10,.0f}"
        print(f"\n{figure}, round by round")
        for name in names:
            got = [r.get(name, {}).get(figure) for r in rounds]
            cells = ["-".rjust(10) if v is None else shown.format(v) for v in got]
            print(f"  {name:<20}{''.join(cells)}")
        for name in names:
            if name == ours:
                continue
            pairs = [(r.get(ours, {}).get(figure), r.get(name, {}).get(figure)) for r in rounds]
            ratios = [a / b for a, b in pairs if a and b]
            if not ratios:
                print(f"  {ours} / {name}: no round has both")
                continue
            per_round = " ".join(f"{x:.2f}" for x in ratios)
            median = statistics.median(ratios)
            print(f"  {ours} / {name}: median {median:.2f}x (rounds: {per_round})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", help="admin DSN for the harness (default: the harness's own)")
    ap.add_argument("--db", default="peer_rounds", help="scratch database, as the harness's")
    ap.add_argument("--peers", required=True, help="harness peer specs; the last is compared")
    ap.add_argument("--phases", default="drain", help="drain, latency or both (comma list)")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--rounds", type=int, default=6, help="an even number: both orders alike")
    ap.add_argument("--concurrency", type=int, default=10)
    ap.add_argument("--n", type=int, default=2000)
    args = ap.parse_args()
    if not Path("worker_peers.py").is_file():
        sys.exit("peer_rounds.py: run it in ../shared/bench (the harness's folder)")
    if args.rounds < 2 or args.rounds % 2:
        sys.exit(f"peer_rounds.py: --rounds must be even and at least 2, not {args.rounds}")
    phases = args.phases.split(",")
    if not phases or set(phases) - {"drain", "latency"} or len(set(phases)) != len(phases):
        sys.exit(f"peer_rounds.py: --phases takes drain, latency or both, not {args.phases!r}")
    specs = args.peers.split(",")
    if len(specs) < 2 or len(set(specs)) != len(specs):
        sys.exit("peer_rounds.py: --peers needs two different peers or more (the last is compared)")
    rounds: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(args.rounds):
            order = specs if k % 2 == 0 else specs[::-1]
            rounds.append(one_round(args, order, Path(tmp) / f"round{k}.json"))
            print(f"round {k + 1}/{args.rounds} done ({' then '.join(order)})", file=sys.stderr)
    report(rounds)


if __name__ == "__main__":
    main()
