"""``nw-jobs serve`` as an operator starts it, through the real entry point in a
subprocess: where it listens decides its guards (judged by address), a
network bind needs a token or an explicit flag, and a bad port or a
read-only project is one line, never a traceback."""

from __future__ import annotations

import contextlib
import http.client
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from nw.jobs import JobsConfig, enqueue, get_job
from nw.jobs.api import facade
from nw.jobs.core.kinds import register_kind, unregister_kind
from nw.jobs.stores import close_shared_stores, shared_store
from tests.cli.test_cli import REPO, nw_jobs, one_line_error
from tests.helpers import wait_until

FAST = JobsConfig(heartbeat_interval_s=0.2, heartbeat_stale_s=1.0, stale_running_s=2.0)


def _free_port(host: str = "127.0.0.1") -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def served(project, *args: str, connect: str = "127.0.0.1") -> Iterator[tuple[int, list[str]]]:
    """``nw-jobs serve`` running on a free port; yields the port and its stderr lines so far."""
    port = _free_port(connect)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NW_JOBS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    cmd = [sys.executable, "-m", "nw.cli", "serve", "--project", str(project.root)]
    proc = subprocess.Popen(
        [*cmd, "--port", str(port), *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"serve exited {proc.returncode}: {proc.stderr.read()}")
        try:
            socket.create_connection((connect, port), timeout=1).close()
            return True
        except OSError:
            return False

    try:
        wait_until(answers, timeout=30, what="serve to listen")
        yield port, proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def get(connect: str, port: int, path: str, host: str) -> tuple[int, bytes]:
    """``GET path`` on ``connect:port``, its ``Host`` header ``host`` (as a browser sends it)."""
    conn = http.client.HTTPConnection(connect, port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


# ----- the port ---------------------------------------------------------------------------------
@pytest.mark.parametrize("port", ["99999", "65536"])
def test_a_port_out_of_range_is_one_line(project, port):
    result = nw_jobs("serve", "--project", str(project.root), "--port", port, timeout=30)
    one_line_error(result, f"--port must be from 1 to 65535, got {port}")


# ----- where it listens -------------------------------------------------------------------------
@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10"])
def test_a_network_bind_without_a_token_refuses_to_start(project, host):
    result = nw_jobs("serve", "--project", str(project.root), "--host", host, timeout=30)
    one_line_error(result, f"--host {host} serves the network: give a token")
    assert "--allow-network-without-token" in result.stderr


def test_an_explicit_flag_serves_the_network_without_a_token_and_says_so(project):
    with served(project, "--host", "0.0.0.0", "--allow-network-without-token") as (port, proc):
        # Then anyone may reach it, by any name (there is no host guard to bind it to)
        status, _ = get("127.0.0.1", port, "/api/summary", f"tray.lan.example:{port}")
        assert status == 200
    lines = proc.stderr.read().strip().splitlines()
    assert lines[1] == (
        f"warning: http://0.0.0.0:{port}/ serves the network with no token:"
        " anyone who reaches it can start, retry and cancel jobs"
    )
    assert "Traceback" not in "\n".join(lines)


def test_a_network_bind_with_a_token_asks_for_it(project):
    with served(project, "--host", "0.0.0.0", "--token", "s3cret") as (port, proc):
        status, body = get("127.0.0.1", port, "/api/summary", f"tray.lan.example:{port}")
        assert (status, body) == (401, b'{"error":"missing or wrong bearer token"}')
    assert "warning" not in proc.stderr.read()


def _loopback_binds() -> list[str]:
    binds = ["127.1", "127.0.0.2", "localhost"]
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET6) as s:
        s.bind(("::1", 0))
        binds.append("::1")
    return binds


def test_every_loopback_spelling_gets_the_host_guard(project):
    for bind in _loopback_binds():
        connect = {"127.1": "127.0.0.1", "localhost": "127.0.0.1"}.get(bind, bind)
        with served(project, "--host", bind, connect=connect) as (port, _):
            # A page that rebinds its own name to this address is refused
            status, body = get(connect, port, "/api/summary", f"rebind.example:{port}")
            assert status == 400, bind
            assert body == b'{"error":"this server does not answer to that Host"}'
            # The server's own names answer
            own = f"[{connect}]" if ":" in connect else connect
            for name in (f"{own}:{port}", f"localhost:{port}"):
                assert get(connect, port, "/api/summary", name)[0] == 200, (bind, name)


# ----- a project this server may only read ------------------------------------------------------
def test_a_read_only_project_is_served_unreaped_with_one_warning_line(project, monkeypatch, caplog):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient

    import nw.jobs.stores as stores
    from nw.jobs.web import create_app

    # Given a job held by a worker that is gone (it never beat), in a project
    # whose folder this process may only read
    register_kind("test.readonly", "tests.fixtures.bodies:noop")
    try:
        job = enqueue(project, "test.readonly", {}, config=FAST)
        store = shared_store(project, FAST, create=True)
        claimed = store.claim(["test.readonly"], now=time.time(), runner_id="gone", limit=1)
        assert [r.record["job_id"] for r in claimed] == [job.job_id]
        held_since = time.monotonic()
        close_shared_stores()
        monkeypatch.setattr(stores, "_writable", lambda path: False)
        rounds = []
        real = facade.stores_to_reap

        def counted(*args, **kwargs):
            rounds.append(time.monotonic())
            return real(*args, **kwargs)

        monkeypatch.setattr(facade, "stores_to_reap", counted)
        caplog.set_level(logging.INFO, logger="nw")
        # When the server runs long enough for the reaper to judge the job dead, twice
        with TestClient(create_app([project], config=FAST)) as client:
            wait_until(
                lambda: len([t for t in rounds if t > held_since + 3 * FAST.stale_running_s]) >= 2,
                timeout=30,
                what="the reaper's rounds past the job's staleness",
            )
            assert client.get("/api/summary").status_code == 200
    finally:
        unregister_kind("test.readonly")
    # Then the log has one warning line and no traceback, and nothing was written
    said = [r for r in caplog.records if r.name.startswith("nw") and r.levelno >= logging.WARNING]
    assert [(r.levelname, r.getMessage()) for r in said] == [
        ("WARNING", f"not reaping {project.root}: its job store is read-only to this server")
    ]
    assert said[0].exc_info is None
    close_shared_stores()
    assert get_job(project, job.job_id, config=FAST).status == "running"
