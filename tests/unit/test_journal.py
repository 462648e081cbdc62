"""journal.Finishing: a kept outcome is written again until the store takes it,
kept in a file meanwhile (in memory when the file cannot be written), and a
new process replays the files it finds."""

from __future__ import annotations

import threading

from au import ComputationStatus

from nw.jobs.core import outcome
from nw.jobs.core.errors import JobStoreError
from nw.jobs.execution.journal import Finishing
from tests.helpers import wait_until

DECIDED = outcome.Outcome(
    ComputationStatus.COMPLETED, {"finished_at": 5.0, "actual_usd": 2.0}, ended="succeeded"
)


class FlakyStore:
    """Refuses finishes while ``full`` is set; records what it was asked to write."""

    def __init__(self, *, answer: bool = True):
        self.full = threading.Event()
        self.full.set()
        self.answer = answer
        self.tries = 0
        self.written: list[tuple] = []

    def finish_soon(self, job_id, **finish):
        from nw.jobs.stores.roles import settled

        return settled(lambda: self._finish(job_id, **finish))

    def _finish(self, job_id, *, au_status, result, error, fields, attempt):
        self.tries += 1
        if self.full.is_set():
            raise JobStoreError("database or disk is full")
        self.written.append((job_id, attempt, au_status, result, fields))
        return self.answer


def _keep(finishing, done):
    finishing.keep("j1", 3, DECIDED, {"v": "\x00"}, JobStoreError("full"), done=done.append)


def test_a_kept_outcome_is_held_journaled_and_written_once_the_store_takes_it(tmp_path):
    store, done = FlakyStore(), []
    finishing = Finishing(store, tmp_path / "finishing")
    _keep(finishing, done)
    assert finishing.holds("j1") and finishing.job_ids() == ["j1"]
    assert [p.name for p in (tmp_path / "finishing").iterdir()] == ["j1.3.json"]
    wait_until(lambda: store.tries >= 3, what="retries")
    assert finishing.holds("j1") and done == []
    store.full.clear()
    wait_until(lambda: done, what="written")
    assert done == [True] and not finishing.holds("j1")
    assert store.written == [("j1", 3, ComputationStatus.COMPLETED, {"v": "\x00"}, DECIDED.fields)]
    assert list((tmp_path / "finishing").iterdir()) == []
    finishing.close()


def test_a_refused_outcome_is_settled_as_refused(tmp_path):
    store, done = FlakyStore(answer=False), []
    store.full.clear()
    finishing = Finishing(store, tmp_path / "finishing")
    _keep(finishing, done)
    wait_until(lambda: done, what="settled")
    assert done == [False] and not finishing.holds("j1")
    assert list((tmp_path / "finishing").iterdir()) == []


def test_when_the_journal_cannot_be_written_the_outcome_is_kept_in_memory(tmp_path):
    store, done = FlakyStore(), []
    blocked = tmp_path / "finishing"
    blocked.write_text("a file where the folder should be")  # mkdir fails: as a full disk would
    finishing = Finishing(store, blocked)
    _keep(finishing, done)
    wait_until(lambda: store.tries >= 2, what="retries")
    assert finishing.holds("j1")
    blocked.unlink()  # room again: the next retry writes the file
    wait_until(lambda: (blocked / "j1.3.json").exists(), what="journaled on a retry")
    store.full.clear()
    wait_until(lambda: done == [True], what="written")
    finishing.close()


def test_a_new_process_replays_the_files_it_finds(tmp_path):
    first = Finishing(FlakyStore(), tmp_path / "finishing")
    _keep(first, [])
    first.close()  # a worker that stopped with the finish pending
    store = FlakyStore()
    store.full.clear()
    second = Finishing(store, tmp_path / "finishing")
    assert second.replay() == 1
    assert store.written == [("j1", 3, ComputationStatus.COMPLETED, {"v": "\x00"}, DECIDED.fields)]
    assert not second.holds("j1") and list((tmp_path / "finishing").iterdir()) == []


def test_a_replay_the_store_refuses_for_now_is_held_and_retried(tmp_path):
    first = Finishing(FlakyStore(), tmp_path / "finishing")
    _keep(first, [])
    first.close()
    store = FlakyStore()
    second = Finishing(store, tmp_path / "finishing")
    assert second.replay() == 1 and second.holds("j1")  # a reaper of this process leaves it
    store.full.clear()
    wait_until(lambda: not second.holds("j1"), what="written on a retry")
    assert len(store.written) == 1
    second.close()
