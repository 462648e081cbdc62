"""What only the PostgreSQL backend has: migrations, namespaces, LISTEN, secrets in URLs."""

from __future__ import annotations

import datetime
import logging
import threading
import time
import uuid

import psycopg
import pytest

import nw
from nw import jobs
from nw.jobs.core.errors import JobStoreError
from tests.conftest import POSTGRES_URL, require_postgres
from tests.contract.test_store_contract import record
from tests.integration.pg_proxy import relayed

pytestmark = pytest.mark.postgres


@pytest.fixture
def pg_url():
    return require_postgres()


@pytest.fixture
def fresh_db(pg_url):
    """The URL of a new, empty database (dropped afterwards)."""
    from nw.jobs.execution.runtimes import shutdown_runtimes
    from nw.jobs.stores import close_shared_stores
    from nw.jobs.stores.postgres import close_pools

    name = f"nw_jobs_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, _ = pg_url.rpartition("/")
    yield f"{base}/{name}"
    # Stop whatever still uses the database before dropping it: a runtime's beat
    # would otherwise retry against a vanished database until it gives up.
    shutdown_runtimes(wait=True)
    close_shared_stores()
    close_pools()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'nw_jobs' ORDER BY 1"
        ).fetchall()
    return [r[0] for r in rows]


# ----- migrations ------------------------------------------------------------------
def test_a_read_never_creates_the_schema_and_says_to_migrate(fresh_db, tmp_path):
    project = nw.Project.init(tmp_path / "p")
    cfg = jobs.JobsConfig(database_url=fresh_db)
    for read in (
        lambda: jobs.summarize(project, config=cfg),
        lambda: jobs.list_jobs(project, config=cfg),
    ):
        with pytest.raises(JobStoreError, match="nw-jobs db migrate"):
            read()
    assert _tables(fresh_db) == []
    # a folder that never got an id reads as empty, without asking the database
    bare = tmp_path / "bare"
    bare.mkdir()
    assert jobs.summarize(bare, config=cfg) == [] and list(bare.iterdir()) == []


def test_migrate_is_versioned_idempotent_and_safe_from_two_hosts_at_once(fresh_db):
    from nw.jobs.stores.pg_schema import migration_files
    from nw.jobs.stores.postgres import migrate

    results: list[list[str]] = []
    barrier = threading.Barrier(3)

    def host():
        barrier.wait()
        results.append(migrate(fresh_db))

    threads = [threading.Thread(target=host) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [name for _, name, _ in migration_files()]
    assert every[:4] == [
        "0001_init.sql",
        "0002_limits.sql",
        "0003_console.sql",
        "0004_one_row.sql",
    ]
    # each migration applied once, by whichever host took its lock first
    assert sorted(name for applied in results for name in applied) == every
    assert migrate(fresh_db) == []
    assert set(_tables(fresh_db)) == {
        "approval",
        "budgets",
        "durations",
        "jobs",
        "job_edges",
        "job_waits",
        "limits",
        "parked",
        "pipeline_steps",
        "pipelines",
        "progress",
        "runners",
        "schema_migrations",
        "spend_rollup",
    }


def test_a_write_path_refuses_an_unmigrated_database_too(fresh_db, tmp_path):
    from nw.jobs.stores.postgres import migrate

    project = nw.Project.init(tmp_path / "p")
    cfg = jobs.JobsConfig(database_url=fresh_db)
    ok = {"r": lambda p, q: {"ok": 1}}
    with pytest.raises(JobStoreError, match="nw-jobs db migrate"):
        jobs.enqueue(project, "r", {}, dispatch=ok, config=cfg)
    assert _tables(fresh_db) == []
    assert migrate(fresh_db)[:1] == ["0001_init.sql"]
    job = jobs.enqueue(project, "r", {}, dispatch=ok, config=cfg)
    from tests.helpers import wait_until

    done = wait_until(
        lambda: (j := jobs.get_job(project, job.job_id, config=cfg)).is_terminal and j
    )
    assert done.status == jobs.SUCCEEDED


def test_a_newer_schema_than_this_code_knows_is_refused(fresh_db):
    from nw.jobs.stores.postgres import PostgresJobStore, migrate

    migrate(fresh_db)
    with psycopg.connect(fresh_db) as conn:
        conn.execute("INSERT INTO nw_jobs.schema_migrations (version, name) VALUES (999, 'x')")
    with pytest.raises(JobStoreError, match="newer than this nw-jobs"):
        PostgresJobStore(fresh_db, "p1")  # nor does a write handle migrate down


# ----- namespaces ----------------------------------------------------------------------------
def test_projects_in_one_database_do_not_see_each_others_jobs(pg_url, tmp_path):
    from tests.conftest import purge_postgres_project

    cfg = jobs.JobsConfig(database_url=pg_url)
    a, b = nw.Project.init(tmp_path / "a"), nw.Project.init(tmp_path / "b")
    try:
        ok = {"r": lambda p, q: {"ok": 1}}
        ja = jobs.enqueue(a, "r", {"same": 1}, dispatch=ok, config=cfg)
        jb = jobs.enqueue(b, "r", {"same": 1}, dispatch=ok, config=cfg)
        assert ja.job_id != jb.job_id  # ids derive from the project id
        assert [j.job_id for j in jobs.list_jobs(a, config=cfg)] == [ja.job_id]
        assert [j.job_id for j in jobs.summarize(b, config=cfg)] == [jb.job_id]
        assert jobs.get_job(a, jb.job_id, config=cfg) is None
    finally:
        jobs.list_jobs(a, config=cfg)  # let the bodies land before the purge
        purge_postgres_project(a)
        purge_postgres_project(b)


def test_the_same_project_mounted_at_two_paths_is_one_namespace(pg_url, tmp_path):
    import shutil

    from tests.conftest import purge_postgres_project

    cfg = jobs.JobsConfig(database_url=pg_url)
    here = nw.Project.init(tmp_path / "host-a" / "proj")
    try:
        job = jobs.enqueue(here, "r", {"n": 1}, dispatch={"r": lambda p, q: 1}, config=cfg)
        there = tmp_path / "host-b" / "mnt"
        shutil.copytree(here.meta_dir, there / ".nw")  # the other host's mount
        assert jobs.get_job(there, job.job_id, config=cfg) is not None
    finally:
        purge_postgres_project(here)


# ----- waking workers --------------------------------------------------------------------------
def test_an_enqueue_wakes_a_listening_worker_at_once(pg_url):
    from nw.jobs.stores.postgres import PostgresJobStore

    store = PostgresJobStore(pg_url, f"wake-{uuid.uuid4().hex}")
    listener = store.wake_listener("w-test")
    try:
        assert listener.wait(0.05) is False  # nothing queued: it times out
        woke = []  # True only when woken: a wait that runs out answers False
        t = threading.Thread(target=lambda: woke.append(listener.wait(5)))
        t.start()
        store.create(record(f"{1:064x}"), claimable=True)
        t.join()
        assert woke == [True]
        store.create(record(f"{2:064x}"), claimable=False)  # not claimable: no wake
        assert listener.wait(0.1) is False
        store.wake_workers()  # the explicit hook
        assert listener.wait(1.0) is True
    finally:
        listener.close()
        store.purge()


def test_one_listener_wakes_for_every_project_it_also_listens_on(pg_url, tmp_path):
    from nw.jobs.stores.postgres import PostgresJobStore
    from nw.jobs.stores.sqlite import SqliteJobStore

    a = PostgresJobStore(pg_url, f"wake-a-{uuid.uuid4().hex}")
    b = PostgresJobStore(pg_url, f"wake-b-{uuid.uuid4().hex}")
    c = PostgresJobStore(pg_url, f"wake-c-{uuid.uuid4().hex}")  # not listened on
    listener = a.wake_listener("w-multi")
    try:
        listener.also(b)
        listener.also(b)  # idempotent
        listener.also(SqliteJobStore(tmp_path / "jobs.sqlite3"))  # datagram wake: nothing to add
        assert listener.channels == (a.channel, b.channel)
        assert listener.wait(0.05) is False
        woke = []  # True only when woken: a wait that runs out answers False
        t = threading.Thread(target=lambda: woke.append(listener.wait(5)))
        t.start()
        b.create(record(f"{1:064x}"), claimable=True)  # an enqueue in project B
        t.join()
        assert woke == [True]
        c.create(record(f"{1:064x}"), claimable=True)
        assert listener.wait(0.2) is False  # C is not one of its projects
        a.wake_workers()
        assert listener.wait(1.0) is True
        # a lost connection comes back listening on every channel
        listener._conn.close()
        assert listener.wait(0.1) is True  # reconnected: poll once
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("SELECT pg_notify(%s, '')", (b.channel,))
        assert listener.wait(1.0) is True
        with pytest.raises(ValueError, match="cannot listen"):
            listener.also(PostgresJobStore(pg_url.replace("127.0.0.1", "localhost"), "x"))
    finally:
        listener.close()
        for store in (a, b, c):
            store.purge()


# ----- retries after a lost reply ----------------------------------------------------------------
def _commit_then_lose_the_reply(store, monkeypatch):
    """Every write runs twice: once committed (its reply "lost"), then retried."""
    run = store.db.run

    def twice(fn, *, what):
        run(fn, what=what)
        return run(lambda conn, _retried: fn(conn, True), what=what)

    monkeypatch.setattr(store.db, "run", twice)


def test_progress_and_samples_retried_after_a_lost_reply_are_written_once(pg_url, monkeypatch):
    from nw.jobs.stores.postgres import PostgresJobStore

    store = PostgresJobStore(pg_url, f"retry-{uuid.uuid4().hex}")
    try:
        job_id = f"{1:064x}"
        store.create(record(job_id), claimable=True)
        store.claim(["render"], now=2e9, runner_id="w")
        for i in range(3):
            store.add_samples({"k": float(i)}, now=1e9 + i, window=3)
        _commit_then_lose_the_reply(store, monkeypatch)
        assert store.append_progress(job_id, {"ts": 1.0, "pct": 5.0, "message": "a"}, attempt=1)
        assert store.append_progress(job_id, {"ts": 2.0, "pct": None}, attempt=None)
        assert not store.append_progress(job_id, {"ts": 3.0}, attempt=7)
        assert [b["ts"] for b in store.progress(job_id, limit=10)] == [1.0, 2.0]
        store.add_samples({"k": 9.0, "j": 1.0}, now=1e9 + 10, window=3)
        assert store.samples(["k", "j"], window=10) == {"k": [1.0, 2.0, 9.0], "j": [1.0]}
    finally:
        monkeypatch.undo()
        store.purge()


# ----- secrets in the URL ------------------------------------------------------------------------
SECRET = "s3cr3t-Pa55w0rd"


def test_a_password_in_the_url_never_reaches_errors_or_logs(caplog, tmp_path, monkeypatch):
    from nw.jobs.stores.postgres import PostgresJobStore, close_pools, migrate

    monkeypatch.setenv("NW_JOBS_PG_RETRY_S", "0.5")
    caplog.set_level(logging.DEBUG)
    unreachable = f"postgresql://nw:{SECRET}@127.0.0.1:1/nowhere?connect_timeout=1"
    malformed = f"postgresql://nw:{SECRET}@127.0.0.1:notaport/db"
    errors = []
    for url in (unreachable, malformed):
        for attempt in (
            lambda url=url: PostgresJobStore(url, "p", retry_s=0.5),
            lambda url=url: migrate(url),
            lambda url=url: jobs.summarize(
                nw.Project.init(tmp_path / "p"), config=jobs.JobsConfig(database_url=url)
            ),
        ):
            with pytest.raises(JobStoreError) as info:
                attempt()
            errors.append(info.value)
    close_pools()
    for err in errors:
        text = f"{err} {err!r} {err.__cause__!r} {err.__context__!r}"
        assert SECRET not in text
        assert "127.0.0.1" in str(err)  # still says where it tried
    logged = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert SECRET not in logged


def test_a_store_shows_its_url_without_the_password(pg_url):
    from nw.jobs.stores.postgres import PostgresJobStore

    base = pg_url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")
    store = PostgresJobStore(base, f"show-{uuid.uuid4().hex}")
    assert SECRET not in repr(store) and SECRET not in store.db.display
    assert POSTGRES_URL.split("@")[1] in store.db.display


# ----- driver errors, classified by type ---------------------------------------------------------
def test_an_unreachable_database_and_a_refused_statement_are_told_apart_by_type(pg_url):
    from nw.jobs.core.errors import JobStoreUnreachable
    from nw.jobs.stores.postgres import PostgresJobStore

    # An unreachable database: JobStoreUnreachable (a JobStoreError) once retries are spent
    with pytest.raises(JobStoreUnreachable, match="unreachable"):
        PostgresJobStore("postgresql://nw@127.0.0.1:1/nowhere?connect_timeout=1", "p", retry_s=0.3)
    # A statement the database refuses: a JobStoreError that is not "unreachable"
    store = PostgresJobStore(pg_url, f"errors-{uuid.uuid4().hex}")
    with pytest.raises(JobStoreError) as info:
        store.db.run(lambda conn, _retried: conn.execute("SELECT 1 / 0"), what="dividing")
    assert not isinstance(info.value, JobStoreUnreachable)


@pytest.fixture
def two_queued(pg_url):
    """A fresh project's PostgreSQL store holding two queued jobs, oldest first."""
    from nw.jobs.stores.postgres import PostgresJobStore

    store = PostgresJobStore(pg_url, f"two-{uuid.uuid4().hex}")
    first, second = (record(kind="render", at=1_700_000_000.0 + i) for i in range(2))
    for rec in (first, second):
        store.create(rec, claimable=True)
    try:
        yield store, first["job_id"], second["job_id"]
    finally:
        store.refill = None
        store.purge()


def test_a_finish_the_database_refuses_fails_alone_in_its_batch(two_queued):
    from au import ComputationStatus

    from nw.jobs.stores.pg_finishes import _finish_entry

    # Given two running jobs
    store, g, b = two_queued
    claimed = store.claim(["render"], now=1_800_000_000.0, runner_id="w", limit=2)
    attempt = {r.record["job_id"]: r.record["attempt"] for r in claimed}
    failed = ComputationStatus.FAILED.value
    # When one batch holds a finish PostgreSQL refuses (a NUL in text) and a good one
    results = store._finish_many(
        [
            _finish_entry(g, attempt[g], failed, None, "x", {}),
            _finish_entry(b, attempt[b], failed, None, "\0", {}),
        ]
    )
    # Then the good one is written and only the bad one reports the error
    assert results[0] is True and isinstance(results[1], JobStoreError)
    assert store.get(g).status.value == "failed"
    assert store.get(b).status.value == "running"


def test_a_refill_whose_statement_fails_is_answered_with_no_rows(two_queued):
    from au import ComputationStatus

    from nw.jobs.stores.roles import Refill

    # Given a running job, one queued, and a worker's refill on the store
    store, _, queued = two_queued
    (row,) = store.claim(["render"], now=1_800_000_000.0, runner_id="w", limit=1)
    takes = []
    store.refill = Refill(
        kinds=lambda: ["render"],
        runner_id="w",
        want=lambda ids: 1,
        take=lambda rows, asked: takes.append((rows, asked)),
        clock=lambda: 1_800_000_001.0,
    )
    # When its finish is one PostgreSQL refuses (a time that is not a number;
    # a NUL no longer is one: stores replace it, nw/jobs/core/storable.py)
    with pytest.raises(JobStoreError):
        store.finish(
            row.record["job_id"],
            au_status=ComputationStatus.FAILED,
            result=None,
            error="x",
            fields={"finished_at": "not a time"},
            attempt=row.record["attempt"],
        )
    # Then the claim it asked for is answered as not made, and nothing was claimed
    assert takes == [(None, 1)]
    assert store.get(queued).status.value == "queued"


def test_migrating_to_one_row_per_job_keeps_every_status_entry(fresh_db, monkeypatch):
    from au import ComputationStatus

    from nw.jobs.stores import pg_schema
    from nw.jobs.stores.postgres import PostgresJobStore, migrate

    # Given a database at schema 0003, whose jobs have their au status entries
    # in the `status` table (one finished with a value, one cancelled, one
    # running, and one whose entry is missing)
    every = pg_schema.migration_files()
    monkeypatch.setattr(pg_schema, "migration_files", lambda: every[:3])
    migrate(fresh_db)
    monkeypatch.undo()
    jobs_sql = (
        "INSERT INTO nw_jobs.jobs (project_id, job_id, created_at, kind, attempt, doc,"
        " au_status, cancel_requested, finished_at)"
        " VALUES ('p1', %s, 1700000000, 'render', 1, '{}', %s, %s, %s)"
    )
    status_sql = (
        "INSERT INTO nw_jobs.status (project_id, job_id, status, value, error,"
        " terminal_reason, created_at, completed_at, attempt)"
        " VALUES ('p1', %s, %s, %s, %s, %s, to_timestamp(1700000000), %s, 1)"
    )
    done_at = datetime.datetime(2026, 12, 3, tzinfo=datetime.UTC)
    with psycopg.connect(fresh_db) as conn:
        for job_id, au, cancel, finished in [
            ("done", "completed", False, 1700000009.0),
            ("cancel", "cancelled", True, 1700000009.0),
            ("run", "running", False, None),
            ("lost", "completed", False, 1700000009.0),
        ]:
            conn.execute(jobs_sql, (job_id, au, cancel, finished))
        conn.execute(status_sql, ("done", "completed", '{"url": "u"}', None, None, done_at))
        conn.execute(status_sql, ("cancel", "cancelled", None, None, "cancel requested", None))
        conn.execute(status_sql, ("run", "running", None, None, None, None))
    # When it is migrated
    from nw.jobs.stores.pg_schema import migration_files

    later = [name for version, name, _ in migration_files() if version >= 4]
    assert later[:2] == ["0004_one_row.sql", "0005_budgets.sql"]
    assert migrate(fresh_db) == later  # 0004 onwards, each once
    assert "status" not in _tables(fresh_db)
    # Then every job reads as it did, its entry now in its own row
    store = PostgresJobStore(fresh_db, "p1")
    done = store.get_status("done")
    assert (done.status, done.value, done.completed_at) == (
        ComputationStatus.COMPLETED,
        {"url": "u"},
        done_at,
    )
    assert store.get("done").result == {"url": "u"}
    assert store.get_status("cancel").terminal_reason == "cancel requested"
    assert store.get("cancel").status.value == "cancelled"
    assert store.get("run").status.value == "running"
    # a job whose entry was missing reads as failed, as it did before
    lost = store.get("lost")
    assert (lost.status.value, lost.error) == ("failed", "the job's status entry is missing")


def test_a_database_missing_a_migration_below_its_highest_is_behind(fresh_db):
    from nw.jobs.stores.postgres import PostgresJobStore, migrate

    # Given a database migrated by a release that shipped 0001 and 0003 but not 0002
    migrate(fresh_db)
    with psycopg.connect(fresh_db) as conn:
        conn.execute("DROP TABLE nw_jobs.limits")
        conn.execute("DELETE FROM nw_jobs.schema_migrations WHERE version = 2")
    # Then a store refuses it until it is migrated, and migrate applies the gap
    with pytest.raises(JobStoreError, match="nw-jobs db migrate"):
        PostgresJobStore(fresh_db, "p1")
    assert migrate(fresh_db) == ["0002_limits.sql"]
    PostgresJobStore(fresh_db, "p1")


def test_every_pooled_connection_walks_indexes_and_never_compiles(pg_url):
    # The session settings every query of the store is planned under
    # (pg_pool._configure): on every pooled connection, sent in one round trip.
    from nw.jobs.stores import pg_pool
    from nw.jobs.stores.postgres import PostgresJobStore

    names = ("enable_bitmapscan", "enable_sort", "jit")
    store = PostgresJobStore(pg_url, f"settings-{uuid.uuid4().hex[:6]}")
    with store.db.pool.connection() as conn:
        shown = [conn.execute(f"SHOW {name}").fetchone() for name in names]
    assert [next(iter(row.values())) for row in shown] == ["off", "off", "off"]

    sent = []

    class Recording:
        def execute(self, query, *args):
            sent.append(query)
            return conn.execute(query, *args)

    with psycopg.connect(pg_url, autocommit=True) as conn:
        pg_pool._configure(Recording())
        assert len(sent) == 1  # one statement string: one round trip
        assert [conn.execute(f"SHOW {name}").fetchone()[0] for name in names] == ["off"] * 3


def test_what_lost_claims_took_is_read_until_it_is_put_back(two_queued, monkeypatch):
    from nw.jobs.core.errors import JobStoreUnreachable

    store, first, second = two_queued
    now = 1_800_000_000.0
    # Given two claims that each committed, their answers lost (the retries given up)
    real_run = store.db.run

    def answer_lost(fn, *, what):
        real_run(fn, what=what)
        raise JobStoreUnreachable(f"job store: {what} failed: the database is unreachable")

    monkeypatch.setattr(store.db, "run", answer_lost)
    for _ in range(2):
        with pytest.raises(JobStoreUnreachable):
            store.claim(["render"], now=now, runner_id="w", limit=1)
    monkeypatch.undo()
    # When reading what they took fails half-way
    real_read, reads = store._read, []

    def second_read_fails(what, args, query=None):
        reads.append(what)
        if len(reads) == 2:
            raise JobStoreUnreachable("job store: the database is unreachable")
        return real_read(what, args, query)

    monkeypatch.setattr(store, "_read", second_read_fails)
    with pytest.raises(JobStoreUnreachable):
        store.lost_claims()
    monkeypatch.undo()
    # Then both jobs are read again, as often as asked, until they are put back
    assert sorted(row.record["job_id"] for row in store.lost_claims()) == sorted([first, second])
    assert [row.status.value for row in store.lost_claims()] == ["running", "running"]
    for row in store.lost_claims():
        job_id, attempt = row.record["job_id"], row.record["attempt"]
        assert store.requeue(job_id, fields={}, not_before=now, attempt=attempt)
    assert store.lost_claims() == []


def test_a_refill_whose_statement_fails_is_answered_after_the_finishes_are_written(pg_url):
    from nw.jobs.stores.pg_finishes import _finish_entry
    from nw.jobs.stores.postgres import PostgresJobStore
    from nw.jobs.stores.roles import Refill

    # Given two running jobs of a worker and one queued behind them
    store = PostgresJobStore(pg_url, f"order-{uuid.uuid4().hex}")
    try:
        recs = [record(kind="render", at=1_700_000_000.0 + i) for i in range(3)]
        for rec in recs:
            store.create(rec, claimable=True)
        running = store.claim(["render"], now=1_800_000_000.0, runner_id="w", limit=2)
        good, bad = (row.record for row in running)
        seen = []
        store.refill = Refill(
            kinds=lambda: ["render"],
            runner_id="w",
            want=lambda ids: 1,
            take=lambda rows, asked: seen.append((rows, store.get(good["job_id"]).status.value)),
            clock=lambda: 1_800_000_001.0,
        )

        def item(rec, error):
            fields = {"finished_at": 1_800_000_001.0}
            return _finish_entry(rec["job_id"], rec["attempt"], "failed", None, error, fields)

        # When their finishes go out together and PostgreSQL refuses one (a NUL
        # in text), so the statement that also claims fails
        results = store._finish_many([item(good, "boom"), item(bad, "\0")])
        # Then each finish is written alone first, and only then is the claim
        # answered as not made (its slots are counted taken until then)
        assert results[0] is True and isinstance(results[1], JobStoreError)
        assert seen == [(None, "failed")]
    finally:
        store.refill = None
        store.purge()


def _traced_syncs(conn, path):
    """Trace ``conn``'s protocol messages into ``path`` (libpq's trace)."""
    from psycopg import pq

    f = open(path, "w")  # noqa: SIM115  (closed by the caller's untrace)
    conn.pgconn.trace(f.fileno())
    conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS | pq.Trace.REGRESS_MODE)
    return f


def _sent(path, message):
    """How many ``message``s the client sent (a ``Parse`` of a named statement:
    ``"Parse+"``, a statement being prepared)."""
    named = message.endswith("+")
    message = message.rstrip("+")
    return sum(
        1
        for line in open(path).read().splitlines()
        if line.startswith("F\t")
        and f"\t{message}\t" in line + "\t"
        and (not named or '\t "" ' not in line)
    )


def _frozen_after_one_send(relay, call) -> threading.Thread:
    """``call()`` on a thread of its own, its process frozen (as far as the
    server can tell) after its first send: what it sends later never arrives."""
    relay.freeze_after(1)
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


def _committed(pg_url, query: str, params, expected) -> bool:
    """Whether ``query`` (a plain read, no locks) comes to read ``expected``
    within 5 s: what a frozen client sent has been committed."""
    deadline = time.monotonic() + 5.0
    with psycopg.connect(pg_url, autocommit=True) as other:
        while time.monotonic() < deadline:
            if other.execute(query, params).fetchall() == expected:
                return True
            time.sleep(0.01)
    return False


def _write_waits(pg_url, statement: str, params=None) -> bool:
    """Whether ``statement`` has to wait for a lock another session holds."""
    with psycopg.connect(pg_url, autocommit=True) as other:
        other.execute("SET lock_timeout = '3s'")
        try:
            other.execute(statement, params)
        except psycopg.errors.LockNotAvailable:
            return True
    return False


def test_a_client_frozen_after_sending_a_statement_holds_no_lock(pg_url):
    # In a pipeline the server runs a statement as its Execute arrives and
    # commits it at the Sync, sent later: a process frozen in between (SIGSTOP,
    # a paused container) holds the statement's row locks, and another
    # worker's reaper or a cancel waits on them for as long. `one` sends the
    # statement and its Sync at once: once sent, it commits.
    from nw.jobs.stores.pg_database import one

    table = f"frozen_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_url, autocommit=True) as setup:
        setup.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, x int)")
        setup.execute(f"INSERT INTO {table} VALUES (1, 0)")
    try:
        with relayed(pg_url) as (relay, url), psycopg.connect(url, autocommit=True) as conn:
            query = f"UPDATE {table} SET x = x + 1 WHERE id = %(id)s"
            one(conn, query, {"id": 1})  # its first run: prepared (a Parse, sent alone), run
            for run in range(1, 9):
                sent = _frozen_after_one_send(relay, lambda: one(conn, query, {"id": 1}))
                try:  # its update committed, then nothing of it left holding the row
                    seen = f"SELECT x FROM {table}"
                    done = _committed(pg_url, seen, None, [(11 * run - 9,)])
                    waits = _write_waits(pg_url, f"UPDATE {table} SET x = x + 10 WHERE id = 1")
                finally:
                    relay.thaw()  # the client goes on (and lets go of its connection)
                    sent.join(10)
                assert done, f"run {run}: the frozen client's statement is not committed"
                assert not waits, f"run {run}: the frozen client's statement holds its lock"
                assert not sent.is_alive()
    finally:
        with psycopg.connect(pg_url, autocommit=True) as setup:
            setup.execute(f"DROP TABLE IF EXISTS {table}")


def test_a_client_frozen_after_sending_a_claim_with_its_beat_holds_no_lock(pg_url, monkeypatch):
    # The carried beat and the claim go as one message: once sent, both commit,
    # whatever becomes of the process that sent them.
    from nw.jobs.stores import pg_pool
    from nw.jobs.stores.postgres import PostgresJobStore

    monkeypatch.setenv(pg_pool.POOL_MAX_ENV, "1")
    project_id = f"frozen-{uuid.uuid4().hex[:6]}"
    with relayed(pg_url) as (relay, url):
        store = PostgresJobStore(f"{url}?application_name={project_id}", project_id)
        try:
            store.register_runner("w", {"role": "worker"}, now=1_700_000_000.0)
            row, _ = store.create(record(kind="frozen", at=1_700_000_000.0), claimable=True)
            job_id = row.record["job_id"]
            with store.db.pool.connection():
                pass  # the pool's connection is open: its next send is the claim's
            claim = lambda: store.claim_and_beat(["frozen"], now=1_800_000_000.0, runner_id="w")  # noqa: E731
            _frozen_after_one_send(relay, claim)
            seen = (
                "SELECT j.runner_id, r.beat_at FROM nw_jobs.jobs j JOIN nw_jobs.runners r"
                " USING (project_id) WHERE j.project_id = %s"
            )
            # claimed and beaten, both committed, and nothing of it left holding a row
            assert _committed(pg_url, seen, (project_id,), [("w", 1_800_000_000.0)])
            locked = "SELECT 1 FROM nw_jobs.{} WHERE project_id = %s AND {} = %s FOR UPDATE"
            assert not _write_waits(pg_url, locked.format("jobs", "job_id"), (project_id, job_id))
            assert not _write_waits(
                pg_url, locked.format("runners", "runner_id"), (project_id, "w")
            )
        finally:
            relay.thaw()
            store.purge()


def test_a_store_session_stopped_inside_a_transaction_lets_go_of_its_locks(pg_url, monkeypatch):
    # A process stopped inside one of the store's explicit transactions (here
    # a create that finds its job and locks the row to decide) holds the row:
    # a worker beating, finishing or reaping it would wait for as long. The
    # server ends a store session idle in a transaction (pg_pool), the lock
    # goes with it, and the process, going on, finds its connection gone and
    # runs the operation again on a fresh one.
    from nw.jobs.stores import pg_pool
    from nw.jobs.stores.postgres import PostgresJobStore

    monkeypatch.setenv(pg_pool.POOL_MAX_ENV, "1")
    project_id = f"idle-tx-{uuid.uuid4().hex[:6]}"
    store = PostgresJobStore(f"{pg_url}?application_name={project_id}", project_id)
    first = record(kind="idle", at=1_700_000_000.0)
    row, _ = store.create(first, claimable=True)
    job_id = row.record["job_id"]
    lock_row = PostgresJobStore._lock
    seen: dict[str, object] = {}

    def lock_then_stop(self, conn, params):
        got = lock_row(self, conn, params)
        if "stopped" not in seen:  # the first try stops here, holding the row
            seen["stopped"] = conn.info.backend_pid
            with psycopg.connect(pg_url, autocommit=True) as other:
                other.execute("SET lock_timeout = '30s'")  # far past the server's 5 s
                other.execute(
                    "UPDATE nw_jobs.jobs SET heartbeat_at = 1"
                    " WHERE project_id = %s AND job_id = %s",
                    (project_id, job_id),
                )  # waits for the lock, then writes: the stopped session was ended
                seen["gone"] = not other.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (seen["stopped"],)
                ).fetchall()
        return got

    monkeypatch.setattr(PostgresJobStore, "_lock", lock_then_stop)
    try:
        again, _ = store.create(first, claimable=True)  # goes on, on a fresh connection
        assert seen["gone"] is True
        assert again.record["job_id"] == job_id  # the same job (a retry reads it as its own)
        assert [r.record["job_id"] for r in store.live()] == [job_id]
        with store.db.pool.connection() as conn:
            assert conn.info.backend_pid != seen["stopped"]
    finally:
        store.purge()


def test_a_prepared_statement_whose_table_went_away_runs_again_once_it_is_back(pg_url):
    # `one` prepares the store's statements on a pooled connection; a run that
    # fails because its table went away (dropped during a migration) must not
    # leave a statement behind that fails every later run on this connection.
    from nw.jobs.stores.pg_database import one

    table = f"prep_{uuid.uuid4().hex[:8]}"
    query = f"SELECT count(*) AS n FROM {table} WHERE %(x)s::int >= 0"
    with psycopg.connect(pg_url, autocommit=True) as other:
        other.execute(f"CREATE TABLE {table} (x int)")
        try:
            with psycopg.connect(pg_url, autocommit=True) as conn:
                for x in range(5):  # prepared at its first run
                    assert one(conn, query, {"x": x}).fetchone() == (0,)
                other.execute(f"DROP TABLE {table}")
                with pytest.raises(psycopg.errors.UndefinedTable):
                    one(conn, query, {"x": 5})
                other.execute(f"CREATE TABLE {table} (x int)")
                assert [one(conn, query, {"x": x}).fetchone() for x in range(6, 9)] == [(0,)] * 3
        finally:
            other.execute(f"DROP TABLE IF EXISTS {table}")


def test_a_workers_claims_and_finishes_cost_one_round_trip_each(pg_url, tmp_path, monkeypatch):
    # The store's own statements go through `one`: on its one pooled
    # connection, one round trip (Sync) per statement (Bind), each with its
    # Sync, and one more per statement psycopg prepares (once per connection).
    from au import ComputationStatus

    from nw.jobs.stores import pg_pool
    from nw.jobs.stores.postgres import PostgresJobStore

    monkeypatch.setenv(pg_pool.POOL_MAX_ENV, "1")
    url = f"{pg_url}?application_name=trace-{uuid.uuid4().hex[:6]}"  # a pool of its own
    store = PostgresJobStore(url, f"trace-{uuid.uuid4().hex[:6]}")
    trace = tmp_path / "trace.txt"
    with store.db.pool.connection() as conn:
        f = _traced_syncs(conn, trace)
    try:
        for i in range(8):
            store.create(record(kind="traced", at=1_700_000_000.0 + i), claimable=True)
            (row,) = store.claim(["traced"], now=1_800_000_000.0, runner_id="w")
            assert store.finish(
                row.record["job_id"],
                au_status=ComputationStatus.COMPLETED,
                result={"i": i},
                error=None,
                fields={"finished_at": 1_800_000_001.0},
                attempt=row.record["attempt"],
            )
    finally:
        with store.db.pool.connection() as conn:
            conn.pgconn.untrace()
        f.close()
        store.purge()
    binds, syncs = _sent(trace, "Bind"), _sent(trace, "Sync")
    assert _sent(trace, "Parse+") >= 3  # create, claim and finish were each prepared
    assert binds >= 24 and syncs == binds + _sent(trace, "Parse+")


def test_a_claim_carries_the_runners_beat_in_its_own_round_trip(pg_url, tmp_path, monkeypatch):
    # A worker in a trickle claims once per job: its beat rides that claim
    # (two statements in one message, one transaction the server commits
    # without waiting on the client) instead of costing a round trip of its own.
    from nw.jobs.stores import pg_pool
    from nw.jobs.stores.postgres import PostgresJobStore

    monkeypatch.setenv(pg_pool.POOL_MAX_ENV, "1")
    url = f"{pg_url}?application_name=trace-{uuid.uuid4().hex[:6]}"
    store = PostgresJobStore(url, f"trace-{uuid.uuid4().hex[:6]}")
    store.register_runner("w", {"role": "worker"}, now=1_700_000_000.0)
    trace = tmp_path / "trace.txt"
    try:
        for i in range(3):
            store.create(record(kind="traced", at=1_700_000_000.0 + i), claimable=True)
        with store.db.pool.connection() as conn:
            f = _traced_syncs(conn, trace)
        try:
            rows, runners = store.claim_and_beat(
                ["traced"], now=1_800_000_000.0, runner_id="w", limit=3
            )
        finally:
            with store.db.pool.connection() as conn:
                conn.pgconn.untrace()
            f.close()
        assert len(rows) == 3 and [r["beat_at"] for r in runners] == [1_800_000_000.0]
    finally:
        store.purge()
    assert (_sent(trace, "Query"), _sent(trace, "Bind"), _sent(trace, "Sync")) == (1, 0, 0)


def test_a_call_waiting_out_an_outage_is_answered_soon_after_it(pg_url):
    # The pool grows once for a caller that waits; when that growth gave up
    # (the server down) nothing tried again before the caller's 5 s timeout, so
    # a call answered up to 5 s after the server was back (pg_pool.RECONNECT_S).
    from nw.jobs.stores.pg_database import Database

    def select_one(conn, _retried):
        return conn.execute("SELECT 1 AS one").fetchone()

    answered: list[float] = []
    with relayed(pg_url) as (relay, url):
        db = Database(url, retry_s=30)
        assert db.run(select_one, what="a read") == {"one": 1}
        relay.cut()
        waiting = threading.Thread(
            target=lambda: answered.append(db.run(select_one, what="a read") and time.monotonic()),
            daemon=True,
        )
        waiting.start()
        time.sleep(1.0)  # the scenario: a one-second outage, the call waiting it out
        relay.restore()
        back = time.monotonic()
        waiting.join(timeout=30)
    assert answered, "the call never answered"
    assert answered[0] - back < 2.5  # was about 4 s: the 5 s timeout less the outage
