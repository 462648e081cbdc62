"""Kinds the benchmarks register (imported by worker processes with --import)."""

from nw.jobs import register_kind


def noop(project, params):
    return {"i": params.get("i")}


register_kind("bench.noop", "bench_bodies:noop")
