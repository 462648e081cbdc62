"""The pure part of parked jobs (nw/jobs/core/parked.py)."""

from __future__ import annotations

import pytest

from nw.errors import InvalidInput
from nw.jobs import Pending, Submitted
from nw.jobs.core import parked


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Submitted(""),
        lambda: Submitted("r\x00"),
        lambda: Submitted(123),  # type: ignore[arg-type]
        lambda: Submitted("r", provider=" "),
        lambda: Submitted("r", deadline_s=0),
        lambda: Submitted("r", deadline_s=float("nan")),
        lambda: Submitted("r", position=-1),
        lambda: Submitted("r", position=True),  # type: ignore[arg-type]
        lambda: Pending(position=1.5),  # type: ignore[arg-type]
        lambda: Pending(eta_s=-1),
    ],
)
def test_what_a_body_or_a_poll_says_is_checked(bad):
    with pytest.raises(InvalidInput):
        bad()


def test_polls_back_off_and_follow_the_provider_s_estimate():
    waits = [parked.next_poll_in(n, webhook=False) for n in range(8)]
    assert waits[0] == parked.FIRST_POLL_S and waits == sorted(waits)
    assert max(waits) == parked.MAX_POLL_S
    assert parked.next_poll_in(6, webhook=False, pending=Pending(eta_s=3)) == 3
    # with a webhook coming, a poll is a rare safety net
    assert parked.next_poll_in(0, webhook=True) == parked.WEBHOOK_FIRST_POLL_S
    assert parked.next_poll_in(9, webhook=True) == parked.WEBHOOK_POLL_S


@pytest.mark.parametrize(
    ("position", "text"),
    [
        (None, "waiting on fal"),
        (0, "waiting on fal, running there"),
        (1, "waiting on fal, 1st in queue"),
        (2, "waiting on fal, 2nd in queue"),
        (3, "waiting on fal, 3rd in queue"),
        (11, "waiting on fal, 11th in queue"),
        (22, "waiting on fal, 22nd in queue"),
    ],
)
def test_a_parked_job_says_what_it_waits_on(position, text):
    assert parked.waiting_text({"provider": "fal", "position": position}) == text


def test_a_park_remembers_the_request_so_a_retry_reattaches():
    fields = parked.park_fields(
        Submitted("req", deadline_s=60, position=4), now=100.0, webhook=True
    )
    assert fields["resume"] == {"request_id": "req", "provider": "fal"}
    assert fields["parked"]["deadline_at"] == 160.0 and fields["parked"]["position"] == 4
    info = fields["parked"]
    assert parked.pending_fields(info, Pending(position=4), now=101.0) is None  # nothing new
    moved = parked.pending_fields(info, Pending(position=2, eta_s=30), now=101.0)
    assert moved is not None and moved["parked"]["position"] == 2
    assert parked.eta_of(moved["parked"], 111.0) == 20.0


def test_a_poll_without_an_estimate_keeps_the_learned_eta():
    # Given a job parked with the provider phase's learned ETA (at 100 + 30 s)
    info = {**parked.park_fields(Submitted("req"), now=100.0, webhook=False)["parked"]}
    info["eta_at"] = 130.0
    # When a poll says only where it is in the queue
    moved = parked.pending_fields(info, Pending(position=3), now=110.0)
    # Then the queue position is shown and the learned ETA stays
    assert moved is not None and moved["parked"]["position"] == 3
    assert parked.eta_of(moved["parked"], 110.0) == 20.0
    # And a provider's own estimate, when it gives one, replaces it
    told = parked.pending_fields(moved["parked"], Pending(position=1, eta_s=5), now=112.0)
    assert told is not None and parked.eta_of(told["parked"], 112.0) == 5.0


def test_a_parked_jobs_eta_follows_its_place_in_the_providers_queue():
    # Given a job parked 4th in the queue, the provider phase learned at 50 s
    info = {**parked.park_fields(Submitted("req", position=4), now=100.0, webhook=False)["parked"]}
    info |= {"eta_at": 150.0, "provider_s": 50.0}
    # When a poll says it moved to 1st (no estimate of the provider's own)
    moved = parked.pending_fields(info, Pending(position=1), now=120.0)
    # Then the ETA is the share of the phase the queue has left: 50 * 2/5 = 20 s
    assert moved is not None and parked.eta_of(moved["parked"], 120.0) == 20.0
    # And running there (position 0), one place's share: 50 * 1/5 = 10 s
    running = parked.pending_fields(moved["parked"], Pending(position=0), now=130.0)
    assert running is not None and parked.eta_of(running["parked"], 130.0) == 10.0
    # And a queue that has not moved keeps the whole phase ahead
    stuck = parked.pending_fields(info, Pending(position=4), now=140.0)
    assert stuck is not None and parked.eta_of(stuck["parked"], 140.0) == 50.0
    # Without a learned phase there is no queue estimate (the position is shown)
    unknown = {**info, "provider_s": None, "eta_at": None}
    shown = parked.pending_fields(unknown, Pending(position=2), now=120.0)
    assert shown is not None and parked.eta_of(shown["parked"], 120.0) is None
