"""Waking idle workers by datagram (the embedded store's wake-ups)."""

from __future__ import annotations

import gc
import sys
import uuid

import pytest

from nw.jobs.execution.wake import WakeListener, wake_runners

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract sockets")


class Announced:
    """A store as ``wake_runners`` reads it: the runners it announces."""

    def __init__(self, address: str):
        self._address = address

    def runners(self) -> list[dict]:
        return [{"runner_id": "w", "wake": self._address}]


def test_a_new_store_never_wakes_the_runners_an_old_one_announced():
    # Given stores made and dropped one after another, each announcing its own
    # worker (CPython gives a new object the address, so the id, of one just
    # dropped: the wake addresses were once cached by id(store), and this
    # failed within the first few rounds)
    for _ in range(50):
        listener = WakeListener(f"nw-test/{uuid.uuid4().hex}")
        address = listener.address or ""
        old = Announced(f"nw-test/{uuid.uuid4().hex}")
        wake_runners(old)  # reads and caches old's addresses
        del old
        gc.collect()
        try:
            new = Announced(address)
            # When the new store wakes its runners
            wake_runners(new)
            # Then its own worker wakes, whatever id the store was given
            assert listener.wait(2.0) is True
        finally:
            listener.close()
