"""One attempt of a body, run on the test's thread against a real store and a fake clock."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from nw.jobs import JobCancelled, JobRefused
from nw.jobs.core.model import JobsConfig
from nw.jobs.core.outcome import backoff_delay
from nw.jobs.core.records import attempt_in_run, to_job
from nw.jobs.execution import body as body_module
from nw.jobs.execution.body import Launch, run_attempt

ID = "b" * 64


@pytest.fixture
def config(clock):
    return JobsConfig(clock=clock, retry_backoff_s=4.0)


def test_a_body_that_returns_succeeds_at_the_clocks_time(store, clock, claimed, config):
    row = claimed(ID)

    def body(project, params):
        clock.advance(7)
        return {"artifact_ref": "a1"}

    run_attempt(store, row, Launch(fn=body, project=None), config)
    got = store.get(ID)
    assert got.status.value == "succeeded" and got.result == {"artifact_ref": "a1"}
    assert got.record["finished_at"] - got.record["started_at"] == 7
    assert got.record["error_kind"] is None


def test_a_retried_crash_waits_for_its_backoff_before_anyone_can_claim_it(
    store, clock, claimed, config
):
    row = claimed(ID, retryable=True, max_attempts=3)

    def body(project, params):
        raise RuntimeError("provider hiccup")

    # the body's launch says nothing of retries: the run's recorded policy decides
    run_attempt(store, row, Launch(fn=body, project=None), config)
    back = store.get(ID)
    assert back.status.value == "queued"
    assert back.record["error"] == "RuntimeError: provider hiccup"
    earliest = backoff_delay(1, config.retry_backoff_s, 0.0)  # the jitter's lower edge
    assert earliest == 2.0
    assert store.claim(["render"], now=clock.now + earliest - 0.01, runner_id="w2") == []
    latest = backoff_delay(1, config.retry_backoff_s, 1.0)
    (again,) = store.claim(["render"], now=clock.now + latest, runner_id="w2")
    assert attempt_in_run(again.record) == 2


def test_a_crash_of_a_run_recorded_not_retried_fails(store, claimed, config, caplog):
    row = claimed(ID, retryable=False, max_attempts=1)

    def body(project, params):
        raise RuntimeError("upstream 502")

    with caplog.at_level("ERROR", logger="nw.jobs"):
        run_attempt(store, row, Launch(fn=body, project=None), config)
    got = store.get(ID)
    assert got.status.value == "failed" and got.record["error_kind"] == "crashed"
    # the log says the error once, not twice ("... (RuntimeError: upstream 502)")
    (line,) = [r.getMessage() for r in caplog.records if "crashed" in r.getMessage()]
    assert line == f"job {ID} crashed: RuntimeError: upstream 502"


def test_a_refusal_keeps_its_detail_and_hides_secrets(store, claimed, config):
    row = claimed(ID)

    def body(project, params):
        raise JobRefused("key sk-12345 has no credit", detail={"key": "sk-12345"})

    run_attempt(store, row, Launch(fn=body, project=None, secrets={"fal": "sk-12345"}), config)
    got = store.get(ID)
    assert got.status.value == "failed" and got.record["error_kind"] == "refused"
    assert got.record["error"] == "key *** has no credit"
    assert got.record["error_detail"] == {"key": "***"}


@pytest.mark.parametrize("stops", ["raises", "looked-and-returned", "returned-without-looking"])
def test_a_body_cancelled_on_request_ends_cancelled_however_it_stops(
    store, clock, claimed, config, stops
):
    row = claimed(ID)

    def body(project, params, *, should_cancel):
        store.request_cancel(ID, now=clock.now)  # a person, from another process
        if stops == "returned-without-looking":
            return {"rendered": True}
        assert should_cancel()
        if stops == "raises":
            raise JobCancelled("stopped at a boundary")
        return {"rendered": True}

    run_attempt(store, row, Launch(fn=body, project=None), config)
    got = store.get(ID)
    job = to_job(got, clock.now, config)
    assert job.status == "cancelled" and job.error_kind == "cancelled"
    assert job.error.startswith("cancelled on request")
    if stops != "returned-without-looking":  # what the attempt knew, it wrote
        assert got.record["error_kind"] == "cancelled"


def test_a_body_stopped_by_a_shutdown_goes_back_without_spending_an_attempt(
    store, clock, claimed, config
):
    row = claimed(ID, retryable=True, max_attempts=2)
    stopping = threading.Event()

    def body(project, params, *, should_cancel, on_event):
        on_event({"fraction": 0.5})
        stopping.set()  # SIGTERM arrives
        assert should_cancel()
        raise JobCancelled("stopped at a boundary")

    launch = Launch(fn=body, project=None, stopping=stopping)
    run_attempt(store, row, launch, config)
    assert launch.decided is not None and launch.decided.requeued
    back = store.get(ID)
    assert back.status.value == "queued" and back.record["error"] is None
    (again,) = store.claim(["render"], now=clock.now, runner_id="w2")  # due at once
    assert attempt_in_run(again.record) == 1  # still the first attempt of two

    def finishes(project, params):
        return {"ok": True}

    run_attempt(store, again, Launch(fn=finishes, project=None), config)
    done = store.get(ID)
    assert done.status.value == "succeeded" and done.record["fraction"] is None


def test_a_stale_attempts_outcome_is_refused(store, clock, claimed, config):
    row = claimed(ID, retryable=True, max_attempts=3)

    def body(project, params):
        # meanwhile the job was reaped and claimed by another worker
        store.requeue(ID, fields={}, not_before=clock.now, attempt=row.record["attempt"])
        store.claim(["render"], now=clock.now, runner_id="w2")
        return {"late": True}

    launch = Launch(fn=body, project=None)
    run_attempt(store, row, launch, config)
    got = store.get(ID)
    assert got.status.value == "running" and got.record["runner_id"] == "w2"


def test_a_setup_that_raises_ends_the_attempt_without_running_the_body(
    store, claimed, config, caplog
):
    # Given a launch whose setup (a worker's secrets provider) dies with a
    # BaseException, the kind no provider wrapper catches
    row = claimed(ID)
    ran = []

    def setup(launch):
        raise SystemExit("vault client called exit")

    # When the attempt runs
    run_attempt(
        store, row, Launch(fn=lambda p, q: ran.append(1), project=None, setup=setup), config
    )
    # Then the body never ran and the job is not left running: it failed with that error
    got = store.get(ID)
    assert ran == []
    assert (
        got.status.value == "failed"
        and got.record["error"] == "SystemExit: vault client called exit"
    )
    # and the log says it was the setup, not the body
    assert "its setup raised SystemExit: vault client called exit; the body did not run" in (
        caplog.text
    )


def test_a_handed_over_outcome_is_answered_only_once_it_is_recorded(
    store, claimed, config, monkeypatch
):
    # A worker's body thread hands its finish over and is free; the slot is let
    # go on the answer it gets back. That answer must come after the attempt's
    # outcome is recorded on the launch (the worker's release reads it), even
    # when the store's future is already resolved and its callbacks are still
    # running on the committer's thread.
    row = claimed(ID)
    store_answer: Future = Future()
    monkeypatch.setattr(store, "finish_soon", lambda job_id, **finish: store_answer)
    recording, release = threading.Event(), threading.Event()
    real_written = body_module._written

    def slow_written(*args):
        recording.set()
        assert release.wait(10)
        real_written(*args)

    monkeypatch.setattr(body_module, "_written", slow_written)
    launch = Launch(fn=lambda project, params: {"ok": 1}, project=None)
    result = run_attempt(store, row, launch, config, hand_over=True)
    answered = result.metadata["written"]
    committer = threading.Thread(target=store_answer.set_result, args=(True,))
    committer.start()
    assert recording.wait(10)  # the store answered; the outcome is being recorded
    assert store_answer.done() and not answered.done() and launch.decided is None
    release.set()
    committer.join(10)
    assert answered.done() and launch.decided is not None
