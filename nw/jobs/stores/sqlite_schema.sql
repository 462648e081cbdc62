-- nw.jobs embedded store, schema version 3 (SQLite, WAL mode). Every statement
-- is idempotent (IF NOT EXISTS): a file at an older version is upgraded by
-- running the whole file again.
-- jobs:   the index (membership authority); real columns for what is
--         filtered, ordered or fenced, the rest of the record in `doc` (JSON).
-- status: the au ComputationStore (single source of truth for run status);
--         `queue_at` is set while a worker may claim the job.
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
    doc              TEXT NOT NULL
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

CREATE TABLE IF NOT EXISTS status (
    job_id          TEXT PRIMARY KEY,
    status          TEXT NOT NULL,
    value           TEXT,
    error           TEXT,
    terminal_reason TEXT,
    created_at      TEXT NOT NULL,
    completed_at    TEXT,
    attempt         INTEGER NOT NULL DEFAULT 0,
    queue_at        REAL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS status_queue ON status (queue_at)
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
