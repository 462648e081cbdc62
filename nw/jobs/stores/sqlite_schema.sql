-- nw.jobs embedded store, schema version 8 (SQLite, WAL mode). Every statement
-- is idempotent (IF NOT EXISTS): a file at an older version is upgraded by
-- the statements of sqlite_upgrades.sql (sqlite_base.py runs them, in the
-- same transaction as this whole file run again). Versions: 1 the first; 3
-- the console's (kind and finished indexes, spend_rollup); 4 adds limits,
-- priorities and fair share (2 was that alone); 5 adds the spend policy
-- (budgets, approval: new tables only); 6 parked provider jobs (the parked
-- table only); 7 pipelines (pipelines, pipeline_steps, job_edges: new tables
-- only); 8 one row per job (the `status` table's columns moved into `jobs`,
-- as PostgreSQL's migration 0004 did; jobs_claim re-made on `queue_at`).
-- jobs:   one row per job. The index (membership authority): real columns
--         for what is filtered, ordered or fenced, the rest of the record in
--         `doc` (JSON). The au ComputationStore's status entry (the single
--         source of truth for run status) in the `au_` columns, named as on
--         PostgreSQL: au_status, au_value (the result, JSON text), au_error,
--         au_reason (the terminal reason), au_completed_at (ISO text); the
--         entry's created_at and attempt are the job's own. `queue_at` is set
--         while a worker may claim the job (its due time: a delay's
--         `not_before` or a retry's backoff). A transition is one statement.
-- jobs.limit_key / priority / actor_seq: the key a job counts against, its
--         priority (higher first) and its turn in its actor's queue (fair
--         share); claims order by (priority DESC, actor_seq, created_at).
-- limits: the project's limits by key (every worker of the project sees them);
--         `starts` is the JSON array of the key's start times in the last second.
-- budgets / approval (version 5): the project's spend policy (nw/jobs/budgets.py):
--         a row per budget (`per`: day, week, month in UTC, or NULL: all time;
--         `actor_id`, `kind`: NULL for every one), and at most one approval row.
-- Adding a column: add it at the end of `jobs` here, and an ALTER TABLE for
-- it in sqlite_upgrades.sql (with the next version), run by sqlite_base.py.
CREATE TABLE IF NOT EXISTS jobs (
    job_id           TEXT PRIMARY KEY,
    created_at       REAL NOT NULL,
    kind             TEXT NOT NULL,
    actor_id         TEXT,
    attempt          INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    started_at       REAL,
    finished_at      REAL,
    heartbeat_at     REAL,
    runner_id        TEXT,
    doc              TEXT NOT NULL,
    limit_key        TEXT,
    priority         INTEGER NOT NULL DEFAULT 0,
    actor_seq        INTEGER NOT NULL DEFAULT 0,
    au_status        TEXT NOT NULL DEFAULT 'pending',
    au_value         TEXT,
    au_error         TEXT,
    au_reason        TEXT,
    au_completed_at  TEXT,
    queue_at         REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created_at);
CREATE INDEX IF NOT EXISTS jobs_by_actor ON jobs (actor_id, created_at)
    WHERE actor_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_unfinished ON jobs (created_at)
    WHERE finished_at IS NULL;
-- version 3: history pages of one kind; finished jobs by age (prune, totals),
-- covering the duration histogram (kind, started_at) so it never reads a doc
CREATE INDEX IF NOT EXISTS jobs_by_kind ON jobs (kind, created_at);
CREATE INDEX IF NOT EXISTS jobs_by_finished ON jobs (finished_at, kind, started_at)
    WHERE finished_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_limit_running ON jobs (limit_key)
    WHERE limit_key IS NOT NULL AND started_at IS NOT NULL AND finished_at IS NULL;
CREATE INDEX IF NOT EXISTS jobs_actor_seq ON jobs (coalesce(actor_id, ''), actor_seq)
    WHERE finished_at IS NULL;
-- version 8: the claimable jobs (queue_at set) in claim order, as PostgreSQL's
-- jobs_claim: a claim walks it from the head and reads about as many rows as it takes
CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (priority DESC, actor_seq, created_at, job_id)
    WHERE queue_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS durations (
    key     TEXT NOT NULL,
    at      REAL NOT NULL,
    seconds REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS durations_by_key ON durations (key, at);

CREATE TABLE IF NOT EXISTS progress (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id  TEXT NOT NULL,
    attempt INTEGER,
    ts      REAL NOT NULL,
    pct     REAL,
    message TEXT,
    stage   TEXT
);
CREATE INDEX IF NOT EXISTS progress_by_job ON progress (job_id, seq);

CREATE TABLE IF NOT EXISTS runners (
    runner_id  TEXT PRIMARY KEY,
    info       TEXT NOT NULL,
    started_at REAL NOT NULL,
    beat_at    REAL NOT NULL
);

-- version 3: what pruned jobs carried, per UTC day (of finished_at), kind,
-- actor ('' for none), status and grade: their spend (and whether it is a lower
-- bound) and how many they were, so budgets, spend and totals survive a prune.
CREATE TABLE IF NOT EXISTS spend_rollup (
    day         TEXT    NOT NULL,
    kind        TEXT    NOT NULL,
    actor_id    TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    grade       TEXT    NOT NULL,
    jobs        INTEGER NOT NULL,
    usd         REAL    NOT NULL,
    lower_bound INTEGER NOT NULL,
    PRIMARY KEY (day, kind, actor_id, status, grade)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS limits (
    limit_key   TEXT PRIMARY KEY,
    max_running INTEGER,
    per_second  INTEGER,
    starts      TEXT NOT NULL DEFAULT '[]',
    updated_at  REAL NOT NULL
) WITHOUT ROWID;

-- version 5: the project's spend policy
CREATE TABLE IF NOT EXISTS budgets (
    budget_key TEXT PRIMARY KEY,
    usd        REAL NOT NULL,
    per        TEXT,
    actor_id   TEXT,
    kind       TEXT,
    updated_at REAL NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS approval (
    one           INTEGER PRIMARY KEY CHECK (one = 1),
    threshold_usd REAL,
    mode          TEXT NOT NULL,
    updated_at    REAL NOT NULL
);

-- version 6: parked provider jobs (nw/jobs/core/parked.py). One row per job
-- whose body handed its work to a provider (`request_id` set by the park), or
-- whose webhook arrived before the park was recorded (`request_id` NULL, the
-- payload kept in `webhook` for it). `attempt`: the attempt that parked (a
-- row of an older attempt is stale); `due_at`: its next look (a poll, or a
-- kept webhook: now); `look_until`: a poller's lease on it for one look;
-- `polls`: looks so far (the back-off).
CREATE TABLE IF NOT EXISTS parked (
    job_id      TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    request_id  TEXT,
    due_at      REAL NOT NULL,
    look_until  REAL NOT NULL DEFAULT 0,
    polls       INTEGER NOT NULL DEFAULT 0,
    deadline_at REAL,
    webhook     TEXT
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS parked_due ON parked (due_at);

-- version 7: pipelines (nw/jobs/api/pipelines.py). A pipeline's row (its id
-- is its spec's hash: a resubmission finds it), its steps' jobs by name, and
-- job_edges: job_id waits on upstream_id (`step`: the upstream's step name,
-- the key of its result in the dependent's `inputs`; `allow_failure`: runs
-- even when that upstream fails or is cancelled). A waiting job is queued
-- with no `queue_at`; the transaction that ends its last upstream sets it
-- (nw/jobs/stores/pipelines_sqlite.py). The file's one writer decides, so no
-- count of unmet upstreams is kept here (PostgreSQL keeps one: job_waits).
CREATE TABLE IF NOT EXISTS pipelines (
    pipeline_id TEXT PRIMARY KEY,
    created_at  REAL NOT NULL,
    label       TEXT,
    actor_id    TEXT,
    doc         TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS pipeline_steps (
    pipeline_id TEXT NOT NULL,
    step        TEXT NOT NULL,
    job_id      TEXT NOT NULL,
    PRIMARY KEY (pipeline_id, step)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS pipeline_steps_by_job ON pipeline_steps (job_id);

CREATE TABLE IF NOT EXISTS job_edges (
    upstream_id   TEXT NOT NULL,
    job_id        TEXT NOT NULL,
    step          TEXT,
    allow_failure INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (upstream_id, job_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS job_edges_by_job ON job_edges (job_id);
