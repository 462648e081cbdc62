"""Finishes the store did not take: kept, retried, and replayed after a restart.

When the write of an attempt's outcome fails (the database is away, the disk
is full), the body has already run and, for a paid render, been paid for. Its
result and actual cost must not be lost, and the job must not be run (and
paid) again because nobody wrote them. So a failed outcome write is handed to
the runtime's ``Finishing``:

* it is kept in memory, and in a journal file (one per attempt, written to a
  temporary name and renamed, then fsynced) in the project's
  ``.nw/finishing/`` folder; if that write fails too (a full disk), it stays in
  memory and the file is tried again on every retry;
* a thread writes it again with exponential back-off (``FIRST_RETRY_S``
  doubling up to ``MAX_RETRY_S``), as ``outcome.write`` does (fenced by the
  attempt: a newer attempt refuses it), until the store takes it or refuses it;
  then its file is removed and ``done`` is called;
* meanwhile the runtime still holds the job: its heartbeat goes on and a
  reaper of this process leaves it alone (``holds``), so no reaper calls it
  lost and no retry policy runs it again; a read from this process says it is
  finishing (``FINISHING_HINT``);
* a worker that starts replays the folder's files before it claims anything
  (``replay``): a worker killed with finishes pending loses none of them.

A finish is idempotent under its fence (it writes the same fields for the
same attempt), so two processes replaying one file do no harm.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from au import ComputationStatus

from nw.jobs.core import outcome
from nw.jobs.stores.roles import WorkerStore

log = logging.getLogger("nw.jobs")

FIRST_RETRY_S = 0.1
MAX_RETRY_S = 5.0
FINISHING_HINT = "finishing: its outcome is being recorded"
"""How a job reads, from the process that holds its pending finish."""
DIRNAME = "finishing"
"""The journal's folder, under the project's ``.nw``."""


def journal_dir(project_root: str | os.PathLike[str]) -> Path:
    """The project's journal of pending finishes."""
    return Path(project_root) / ".nw" / DIRNAME


@dataclass
class Pending:
    """One attempt's outcome that the store has not taken yet."""

    job_id: str
    attempt: int | None
    decided: outcome.Outcome
    result: Any = None
    done: Callable[[bool], None] | None = None
    """Called once with True (written) or False (refused as stale)."""
    tries: int = 0
    due: float = 0.0
    on_disk: bool = False
    failure: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"{self.job_id}.{self.attempt if self.attempt is not None else 'any'}.json"

    def to_json(self) -> str:
        d = self.decided
        return json.dumps(
            {
                "job_id": self.job_id,
                "attempt": self.attempt,
                "au_status": d.au_status.value,
                "fields": d.fields,
                "error": d.error,
                "due_at": d.due_at,
                "note": d.note,
                "ended": d.ended,
                "result": self.result,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Pending:
        e = json.loads(text)
        decided = outcome.Outcome(
            ComputationStatus(e["au_status"]),
            dict(e["fields"]),
            error=e.get("error"),
            due_at=e.get("due_at"),
            note=e.get("note") or "",
            ended=e.get("ended"),
        )
        attempt = None if e.get("attempt") is None else int(e["attempt"])
        return cls(str(e["job_id"]), attempt, decided, e["result"])


class Finishing:
    """A runtime's pending finishes (see the module docstring)."""

    def __init__(self, store: WorkerStore, directory: Path | None = None):
        self.store = store
        self.directory = directory
        self._pending: dict[str, Pending] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._thread: threading.Thread | None = None
        self._closed = False

    # ----- what the runtime asks ---------------------------------------------------
    def holds(self, job_id: str) -> bool:
        with self._lock:
            return job_id in self._pending

    def job_ids(self) -> list[str]:
        with self._lock:
            return list(self._pending)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def keep(
        self,
        job_id: str,
        attempt: int | None,
        decided: outcome.Outcome,
        result: Any,
        error: BaseException,
        done: Callable[[bool], None] | None = None,
    ) -> None:
        """An outcome whose write failed with ``error``: kept until written."""
        entry = Pending(job_id, attempt, decided, result, done, tries=1)
        log.error(
            "job %s: could not record its outcome (%s: %s); kept, and written again until it is",
            job_id,
            type(error).__name__,
            error,
        )
        self._persist(entry)
        self._add(entry)

    def nudge(self) -> None:
        """Try every pending finish now (a cancel came through: the store may be back)."""
        with self._lock:
            for entry in self._pending.values():
                entry.due = 0.0
            self._wake.notify_all()

    def replay(self) -> int:
        """The journal's files (a process that stopped with finishes pending),
        each written now where the store takes it, else kept and retried; how
        many were found. Called by a worker before it claims anything."""
        if self.directory is None or not self.directory.is_dir():
            return 0
        found = 0
        for path in sorted(self.directory.glob("*.json")):
            try:
                entry = Pending.from_json(path.read_text())
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.error("journal file %s is unreadable (%s); left in place", path, exc)
                continue
            with self._lock:
                if entry.job_id in self._pending:
                    continue
            found += 1
            entry.on_disk = True
            if not self._try(entry):
                self._add(entry)
        if found:
            log.warning("replayed %d pending finish(es) from %s", found, self.directory)
        return found

    def close(self) -> None:
        """Stop retrying; what is still pending is left in the journal (one
        last try to write the files of those only in memory) for the next
        worker to replay."""
        with self._lock:
            self._closed = True
            left = list(self._pending.values())
            self._wake.notify_all()
        for entry in left:
            self._persist(entry)

    # ----- inside ------------------------------------------------------------------
    def _add(self, entry: Pending) -> None:
        with self._lock:
            entry.due = time.monotonic() + _backoff(entry.tries)
            self._pending[entry.job_id] = entry
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="nw-finishing", daemon=True)
                self._thread.start()
            self._wake.notify_all()

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                now = time.monotonic()
                due = [e for e in self._pending.values() if e.due <= now]
                if not due:
                    wait = min((e.due for e in self._pending.values()), default=now + 1.0) - now
                    self._wake.wait(max(wait, 0.01))
                    continue
            for entry in due:
                self._persist(entry)  # a full disk may have room now
                if not self._try(entry):
                    with self._lock:
                        entry.due = time.monotonic() + _backoff(entry.tries)

    def _try(self, entry: Pending) -> bool:
        """Write the entry; True when it is settled (written or refused)."""
        try:
            written = outcome.write(
                self.store, entry.job_id, entry.attempt, entry.decided, entry.result
            )
        except Exception as exc:
            entry.tries += 1
            said = f"{type(exc).__name__}: {exc}"
            if said != entry.failure:  # once per kind of failure, not once per try
                entry.failure = said
                log.warning("job %s: its outcome is still not recorded (%s)", entry.job_id, said)
            return False
        if written:
            log.warning(
                "job %s: its outcome is recorded (%s), after %d tries",
                entry.job_id,
                entry.decided.ended or entry.decided.note,
                entry.tries + 1,
            )
        else:
            log.warning(
                "job %s: attempt %s is no longer current; its kept outcome was refused",
                entry.job_id,
                entry.attempt,
            )
        self._settle(entry, written)
        return True

    def _settle(self, entry: Pending, written: bool) -> None:
        with self._lock:
            if self._pending.get(entry.job_id) is entry:
                del self._pending[entry.job_id]
        if self.directory is not None and entry.on_disk:
            with contextlib.suppress(FileNotFoundError):
                (self.directory / entry.name).unlink()
        if entry.done is not None:
            try:
                entry.done(written)
            except Exception:
                log.exception("job %s: after its kept outcome was settled", entry.job_id)

    def _persist(self, entry: Pending) -> None:
        """The entry's journal file (once); on failure (a full disk, a folder
        we may not write) it stays in memory and the next retry tries again."""
        if entry.on_disk or self.directory is None:
            return
        path = self.directory / entry.name
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                data = memoryview(entry.to_json().encode("ascii"))
                while data:
                    data = data[os.write(fd, data) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
            _fsync_dir(self.directory)
            entry.on_disk = True
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.error(
                "job %s: its pending outcome could not be journaled in %s (%s); kept in memory",
                entry.job_id,
                self.directory,
                exc,
            )


def _backoff(tries: int) -> float:
    return min(FIRST_RETRY_S * (2 ** max(tries - 1, 0)), MAX_RETRY_S)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
