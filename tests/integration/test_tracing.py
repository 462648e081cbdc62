"""Traces (the ``otel`` extra): a request's span, its enqueue, and each attempt,
in this process and across a real worker process; nothing without the extra.

The SDK's in-memory exporter collects the spans: this process's through
``tracing.provider`` (no global provider is set here), a worker's through
``tests/fixtures/otel_worker.py``, which appends each to a file as it ends.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nw import jobs
from nw.jobs.api import tracing
from nw.jobs.stores import shared_store
from tests.fixtures import bodies
from tests.helpers import REPO, wait_until
from tests.integration.workers import start_worker, stop

pytestmark = pytest.mark.slow


@pytest.fixture
def exporter(monkeypatch):
    provider = TracerProvider()
    exported = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exported))
    monkeypatch.setattr(tracing, "provider", provider)
    return provider, exported


def _hex(span_id: int) -> str:
    return f"{span_id:016x}"


def paid(project, params):
    return {"cost_usd_actual": 0.25}


def test_an_attempt_is_the_child_of_its_enqueue_inside_the_callers_trace(project, cfg, exporter):
    provider, exported = exporter
    # Given a web request's span, inside which a job is enqueued
    with provider.get_tracer("app").start_as_current_span("POST /render") as request:
        job = jobs.enqueue(project, "render", {"i": 1}, dispatch={"render": paid}, config=cfg)
    jobs.wait(project, job.job_id, timeout=30, config=cfg)
    # Then the enqueue is the request's child, and the attempt the enqueue's
    spans = wait_until(
        lambda: (
            (s := {x.name: x for x in exported.get_finished_spans()})
            and "nw.jobs.attempt" in s
            and s
        ),
        what="the attempt's span to end",
    )
    enqueue, attempt = spans["nw.jobs.enqueue"], spans["nw.jobs.attempt"]
    trace_id = request.get_span_context().trace_id
    assert enqueue.context.trace_id == attempt.context.trace_id == trace_id
    assert enqueue.parent.span_id == request.get_span_context().span_id
    assert attempt.parent.span_id == enqueue.context.span_id
    assert enqueue.attributes["nw.job_id"] == job.job_id
    assert attempt.attributes["nw.job_id"] == job.job_id
    assert attempt.attributes["nw.kind"] == "render" and attempt.attributes["nw.attempt"] == 1
    assert attempt.attributes["nw.outcome"] == "succeeded"
    assert attempt.attributes["nw.cost_usd"] == 0.25
    # and the job carries the enqueue's traceparent
    stored = shared_store(project, cfg, create=False).get(job.job_id).record["trace"]
    assert stored["traceparent"].split("-")[2] == _hex(enqueue.context.span_id)


def test_a_worker_process_continues_the_trace_and_a_retry_links_to_the_first_attempt(
    project, cfg, exporter, tmp_path
):
    provider, exported = exporter
    bodies.register_all()
    spans_file = tmp_path / "worker-spans.jsonl"
    # Given a job that crashes once and then succeeds, enqueued inside a trace
    with provider.get_tracer("app").start_as_current_span("POST /render"):
        job = jobs.enqueue(project, "t.flaky", {"marker": str(tmp_path / "m")}, config=cfg)
    (enqueue,) = [s for s in exported.get_finished_spans() if s.name == "nw.jobs.enqueue"]
    # When a worker process (with an SDK of its own) runs it
    worker = start_worker(
        project,
        database_url=cfg.database_url,
        env={"NW_TEST_SPANS": str(spans_file)},
        extra=["--import", "tests.fixtures.otel_worker"],
    )
    try:
        done = jobs.wait(project, job.job_id, timeout=60, config=cfg)
    finally:
        stop(worker)
    assert done.status == jobs.SUCCEEDED and done.attempt == 2
    spans = [json.loads(line) for line in spans_file.read_text().splitlines()]
    first, second = [s for s in spans if s["name"] == "nw.jobs.attempt"]
    # Then both attempts are children of the enqueue, in the caller's trace
    for attempt in (first, second):
        assert attempt["trace_id"] == f"{enqueue.context.trace_id:032x}"
        assert attempt["parent_id"] == _hex(enqueue.context.span_id)
        assert attempt["attributes"]["nw.job_id"] == job.job_id
    assert [first["attributes"]["nw.attempt"], second["attributes"]["nw.attempt"]] == [1, 2]
    assert first["attributes"]["nw.outcome"] == "requeued"
    assert second["attributes"]["nw.outcome"] == "succeeded"
    assert first["attributes"]["nw.cost_usd"] == pytest.approx(0.3)  # what each attempt spent
    assert second["attributes"]["nw.cost_usd"] == pytest.approx(0.2)
    assert second["attributes"]["nw.cost_usd_total"] == pytest.approx(0.5)  # the run's
    # and the retry links to the first attempt
    assert second["links"] == [first["span_id"]]


def test_flush_exports_what_a_batch_processor_still_holds(monkeypatch):
    # Given a provider whose batch processor exports every 60 s (a worker's
    # that leaves by os._exit runs no exit handler to export the rest)
    provider = TracerProvider()
    exported = InMemorySpanExporter()
    provider.add_span_processor(BatchSpanProcessor(exported, schedule_delay_millis=60_000))
    monkeypatch.setattr(tracing, "provider", provider)
    with provider.get_tracer("app").start_as_current_span("an attempt"):
        pass
    assert exported.get_finished_spans() == ()  # held in the batch
    # When the worker flushes before it leaves
    assert tracing.flush() is True
    # Then the span is exported
    assert [s.name for s in exported.get_finished_spans()] == ["an attempt"]
    provider.shutdown()


WITHOUT_OTEL = """
import sys
sys.modules["opentelemetry"] = None  # as if the extra were not installed
import json, nw
from nw import jobs
from nw.jobs.api import tracing
from nw.jobs.stores import shared_store
project = nw.Project.init(sys.argv[1])
job = jobs.enqueue(project, "r", {}, dispatch={"r": lambda project, params: {"ok": 1}})
jobs.wait(project, job.job_id, timeout=30)
record = shared_store(project, jobs.DEFAULT_CONFIG, create=False).get(job.job_id).record
print(json.dumps({"trace": "trace" in record, "tracer": tracing.trace is not None}))
"""


def test_without_the_extra_nothing_is_traced_or_stored(tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_OTEL, str(tmp_path / "p")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"trace": False, "tracer": False}


def test_with_the_api_but_no_sdk_nothing_is_stored(project, cfg):
    # OpenTelemetry's default (no-op) provider: no span records, no traceparent
    job = jobs.enqueue(project, "render", {"i": 2}, dispatch={"render": paid}, config=cfg)
    jobs.wait(project, job.job_id, timeout=30, config=cfg)
    assert "trace" not in shared_store(project, cfg, create=False).get(job.job_id).record
