"""Which process is this, and is a process recorded earlier provably gone?

A runner records ``proc_scope`` (the kernel boot and the pid namespace it
runs in) and ``proc_start`` (its start time in clock ticks since boot) beside
its pid. A reader in the same scope can then prove a runner dead without
waiting for its beat to go stale: its pid no longer exists, is a zombie, or
now belongs to a process that started at another time (the pid was reused).
A hostname is not enough: two containers can share one and still not see
each other's pids. Outside Linux (no ``/proc``) nothing can be proved and
liveness rests on beats alone.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Mapping
from typing import Any

_PROC = "/proc"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/<pid>/stat`` after the command name (which may hold spaces and
    parentheses): field 3 (state) is index 0, field 22 (starttime) index 19."""
    text = _read(f"{_PROC}/{pid}/stat")
    if text is None or ")" not in text:
        return None
    return text.rsplit(")", 1)[1].split()


@functools.cache
def scope() -> str | None:
    """This process's pid space: boot id plus pid-namespace inode (None off Linux)."""
    boot = _read(f"{_PROC}/sys/kernel/random/boot_id")
    try:
        namespace = os.stat(f"{_PROC}/self/ns/pid").st_ino
    except OSError:
        return None
    return None if boot is None else f"{boot.strip()}:{namespace}"


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (IndexError, ValueError):
        return None


def this_process() -> dict[str, Any]:
    """What a runner records about itself so a reader on this host can check on it."""
    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "proc_scope": scope(),
        "proc_start": start_ticks(pid),
    }


def provably_gone(info: Mapping[str, Any]) -> bool:
    """True only when this process can prove the recorded one has exited: same
    pid space, and its pid is free, a zombie, or a later process's."""
    here = scope()
    if here is None or info.get("proc_scope") != here:
        return False
    pid, started = info.get("pid"), info.get("proc_start")
    if not isinstance(pid, int) or not isinstance(started, int):
        return False
    fields = _stat_fields(pid)
    if fields is None:
        return os.path.isdir(_PROC + "/self")  # /proc works and the pid is free
    if fields[0] in ("Z", "X"):  # exited, not yet waited for by its parent
        return True
    return start_ticks(pid) != started
