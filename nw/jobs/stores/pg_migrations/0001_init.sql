-- nw.jobs PostgreSQL store, migration 0001: the initial schema.
--
-- Every table lives in the `nw_jobs` schema and every key starts with
-- `project_id`: many projects share one database, each in its own namespace
-- (the id from the project's `.nw/project.json`, identical on every host).
--
-- jobs:   the index (membership authority). Real columns for what is
--         filtered, ordered, claimed or fenced; the rest of the record in `doc`.
--         `au_status` mirrors status.status (written by the same statement) so
--         that `state`, the normalized job status of nw.jobs.status.job_status,
--         can be a generated column with an index: a status-filtered page is
--         an index range scan, whatever the history.
--         `queue_at` is set while a worker may claim the job (due time);
--         `lease` is the token of the claim/start that made the current
--         attempt (a claim retried after a lost connection recovers by it).
-- status: the au ComputationStore (single source of truth for run status).
CREATE TABLE nw_jobs.jobs (
    project_id       text             NOT NULL,
    job_id           text             NOT NULL,
    created_at       double precision NOT NULL,
    kind             text             NOT NULL,
    idempotency_key  text,
    actor_id         text,
    au_status        text             NOT NULL DEFAULT 'pending',
    attempt          integer          NOT NULL DEFAULT 0,
    cancel_requested boolean          NOT NULL DEFAULT false,
    started_at       double precision,
    finished_at      double precision,
    heartbeat_at     double precision,
    runner_id        text,
    queue_at         double precision,
    lease            text,
    doc              jsonb            NOT NULL,
    state            text GENERATED ALWAYS AS (
        CASE
            WHEN cancel_requested THEN
                CASE WHEN finished_at IS NULL THEN 'cancelling' ELSE 'cancelled' END
            WHEN au_status = 'pending' THEN 'queued'
            WHEN au_status = 'running' THEN 'running'
            WHEN au_status = 'completed' THEN 'succeeded'
            ELSE au_status
        END
    ) STORED,
    PRIMARY KEY (project_id, job_id)
) WITH (fillfactor = 80);

-- newest-first pages, with and without a status / actor filter
CREATE INDEX jobs_page ON nw_jobs.jobs (project_id, created_at DESC, job_id DESC);
CREATE INDEX jobs_state ON nw_jobs.jobs (project_id, state, created_at DESC, job_id DESC);
CREATE INDEX jobs_actor ON nw_jobs.jobs (project_id, actor_id, created_at DESC, job_id DESC)
    WHERE actor_id IS NOT NULL;
-- live(): the unfinished jobs only
CREATE INDEX jobs_live ON nw_jobs.jobs (project_id, created_at) WHERE finished_at IS NULL;
-- claims: the due claimable jobs only (small: rows leave it when claimed)
CREATE INDEX jobs_queue ON nw_jobs.jobs (project_id, queue_at, job_id) WHERE queue_at IS NOT NULL;

CREATE TABLE nw_jobs.status (
    project_id      text        NOT NULL,
    job_id          text        NOT NULL,
    status          text        NOT NULL,
    value           jsonb,
    error           text,
    terminal_reason text,
    created_at      timestamptz NOT NULL,
    completed_at    timestamptz,
    attempt         integer     NOT NULL DEFAULT 0,
    PRIMARY KEY (project_id, job_id)
) WITH (fillfactor = 80);

CREATE TABLE nw_jobs.durations (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id text             NOT NULL,
    key        text             NOT NULL,
    at         double precision NOT NULL,
    seconds    double precision NOT NULL
);
CREATE INDEX durations_by_key ON nw_jobs.durations (project_id, key, at DESC, id DESC);

CREATE TABLE nw_jobs.progress (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id text             NOT NULL,
    job_id     text             NOT NULL,
    attempt    integer,
    ts         double precision NOT NULL,
    pct        double precision,
    message    text,
    stage      jsonb
);
CREATE INDEX progress_by_job ON nw_jobs.progress (project_id, job_id, seq);

-- Plans must not hinge on how many rows one project has: with statistics, a
-- project that is new since the last ANALYZE looks like 1 row, and the planner
-- then walks the whole project through the page index instead of probing the
-- primary key (a claim or finish that grows with history). Without them,
-- `project_id = $1` is assumed moderately selective, and a lookup by job id
-- always takes the primary key.
ALTER TABLE nw_jobs.jobs ALTER COLUMN project_id SET STATISTICS 0;
ALTER TABLE nw_jobs.status ALTER COLUMN project_id SET STATISTICS 0;
ALTER TABLE nw_jobs.progress ALTER COLUMN project_id SET STATISTICS 0;
ALTER TABLE nw_jobs.durations ALTER COLUMN project_id SET STATISTICS 0;

CREATE TABLE nw_jobs.runners (
    project_id text             NOT NULL,
    runner_id  text             NOT NULL,
    info       jsonb            NOT NULL,
    started_at double precision NOT NULL,
    beat_at    double precision NOT NULL,
    PRIMARY KEY (project_id, runner_id)
);
