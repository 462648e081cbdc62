"""The public surface is pinned: a change to it is a deliberate change to this test."""

import json
import subprocess
import sys

import nw.jobs

EXPECTED = {
    "CANCELLED",
    "CANCELLING",
    "DEFAULT_CONFIG",
    "ERROR_KIND_CANCELLED",
    "ERROR_KIND_CRASHED",
    "ERROR_KIND_REFUSED",
    "FAILED",
    "QUEUED",
    "REAPED_REASON",
    "RUNNING",
    "SUCCEEDED",
    "TERMINAL_STATUSES",
    "UNREADABLE_PLAN_REASON",
    "ApprovalRequired",
    "BudgetExceeded",
    "ConfigError",
    "DurationLearningMiddleware",
    "InvalidInput",
    "InvalidJobId",
    "Job",
    "JobCancelled",
    "JobCost",
    "JobProgress",
    "JobRefused",
    "JobStoreError",
    "JobsConfig",
    "KindImportError",
    "NwJobsError",
    "Pending",
    "Status",
    "Submitted",
    "UnknownKind",
    "cancel_job",
    "cost_accuracy",
    "enqueue",
    "enqueue_many",
    "error_kind_of",
    "estimate",
    "get_approval",
    "get_job",
    "get_job_progress",
    "list_budgets",
    "list_jobs",
    "list_limits",
    "predict_total_s",
    "prune",
    "register_kind",
    "remove_budget",
    "retry_job",
    "retry_jobs",
    "set_approval",
    "set_budget",
    "set_limit",
    "snapshot",
    "spend",
    "summarize",
    "to_dict",
    "totals",
    "wait",
    "watch",
    "workers",
    "Pipeline",
    "PipelineStep",
    "cancel_pipeline",
    "enqueue_pipeline",
    "estimate_pipeline",
    "get_pipeline",
    "retry_pipeline",
}


def test_all_is_exactly_the_public_surface():
    assert set(nw.jobs.__all__) == EXPECTED
    public = {n for n in dir(nw.jobs) if not n.startswith("_")}
    submodules = {"aio", "api", "core", "execution", "stores", "web"}  # its packages
    assert public - submodules - EXPECTED == set()


def test_status_constants_are_their_json_values():
    assert {"succeeded", "failed", "cancelled"} == nw.jobs.TERMINAL_STATUSES
    assert [s.value for s in nw.jobs.Status] == [
        "queued",
        "running",
        "cancelling",
        "succeeded",
        "failed",
        "cancelled",
    ]
    assert nw.jobs.DEFAULT_CONFIG.n_min == 3 and nw.jobs.DEFAULT_CONFIG.heartbeat_stale_s == 120.0


def test_every_public_name_resolves_and_a_worker_imports_neither_facade_nor_console():
    import subprocess
    import sys

    for name in nw.jobs.__all__:  # the lazily imported ones too
        assert getattr(nw.jobs, name) is not None, name
    code = (
        "import sys, nw.jobs.execution.worker; "
        "sys.exit(sorted({'nw.jobs.api.facade', 'nw.jobs.api.console'} & set(sys.modules)) or 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr  # a worker starts without them


def test_dir_lists_the_lazily_imported_public_names():
    # A fresh interpreter: nothing has touched the facade's names yet.
    code = "import nw.jobs as j, json; print(json.dumps(dir(j)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    listed = set(json.loads(out.stdout))
    assert {"enqueue", "get_job", "retry_job", "totals"} <= listed
    assert set(nw.jobs.__all__) <= listed
