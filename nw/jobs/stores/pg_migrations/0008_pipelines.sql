-- nw.jobs PostgreSQL store, migration 0008: pipelines (jobs that wait on jobs).
--
-- pipelines:      one row per pipeline (nw/jobs/api/pipelines.py); its id is
--                 the hash of its steps, so a resubmission finds it. `doc`
--                 holds the spec as submitted (steps, their kinds, `after`),
--                 the quote, the label and the actor.
-- pipeline_steps: a pipeline's steps by name, each with its job.
-- job_edges:      `job_id` waits on `upstream_id`; `step` is the upstream's
--                 step name (the key of its result in the dependent's
--                 `inputs`), `allow_failure` lets the dependent run when that
--                 upstream fails or is cancelled.
-- job_waits:      per waiting job, how many of its upstreams have not ended
--                 (the row is the lock two finishing upstreams serialise on:
--                 exactly one of them sees the count reach 0).
--
-- A waiting job is queued with no `queue_at` (no worker claims it). The
-- trigger `jobs_settle_dependents` runs in the transaction that ends a job
-- (any statement that sets its `finished_at`: a finish, a batch of finishes,
-- a cancel): its dependents' counts go down, those at 0 get their `queue_at`
-- (and the project's wake channel a NOTIFY); when it failed or was cancelled,
-- every waiting job below it through edges without `allow_failure` is
-- cancelled in one statement, saying which upstream step stopped it. Release,
-- cancel and fan-in are decided there: no process polls a waiting job.
-- jobs.has_dependents: set on a job when another is linked to wait on it
--   (put_edges), so the settle trigger's WHEN skips every other job's end
--   without calling its function (a row trigger's call on each finish cost
--   the drain about a tenth of its rate on a 2-core machine).
ALTER TABLE nw_jobs.jobs ADD COLUMN IF NOT EXISTS has_dependents boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS nw_jobs.pipelines (
    project_id  text             NOT NULL,
    pipeline_id text             NOT NULL,
    created_at  double precision NOT NULL,
    label       text,
    actor_id    text,
    doc         jsonb            NOT NULL,
    PRIMARY KEY (project_id, pipeline_id)
);

CREATE TABLE IF NOT EXISTS nw_jobs.pipeline_steps (
    project_id  text NOT NULL,
    pipeline_id text NOT NULL,
    step        text NOT NULL,
    job_id      text NOT NULL,
    PRIMARY KEY (project_id, pipeline_id, step)
);
CREATE INDEX IF NOT EXISTS pipeline_steps_by_job ON nw_jobs.pipeline_steps (project_id, job_id);

CREATE TABLE IF NOT EXISTS nw_jobs.job_edges (
    project_id    text    NOT NULL,
    upstream_id   text    NOT NULL,
    job_id        text    NOT NULL,
    step          text,
    allow_failure boolean NOT NULL DEFAULT false,
    PRIMARY KEY (project_id, upstream_id, job_id)
);
CREATE INDEX IF NOT EXISTS job_edges_by_job ON nw_jobs.job_edges (project_id, job_id);

CREATE TABLE IF NOT EXISTS nw_jobs.job_waits (
    project_id text    NOT NULL,
    job_id     text    NOT NULL,
    unmet      integer NOT NULL,
    PRIMARY KEY (project_id, job_id)
);

-- The project's wake channel, as nw.jobs.stores.postgres.channel_for names it.
CREATE OR REPLACE FUNCTION nw_jobs.wake_channel(project text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN project ~ '^[A-Za-z0-9_]{1,48}$' THEN 'nw_jobs_' || lower(project)
                ELSE 'nw_jobs_' || left(encode(sha256(convert_to(project, 'UTF8')), 'hex'), 40)
           END
$$;

CREATE OR REPLACE FUNCTION nw_jobs.settle_dependents() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    ok       boolean := NEW.state = 'succeeded';
    released integer;
    via      text;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM nw_jobs.job_edges e
                    WHERE e.project_id = NEW.project_id AND e.upstream_id = NEW.job_id) THEN
        RETURN NULL;
    END IF;
    -- the edges it meets: all of them when it succeeded, else the allow_failure ones
    WITH met AS (
        UPDATE nw_jobs.job_waits w SET unmet = w.unmet - 1
          FROM nw_jobs.job_edges e
         WHERE e.project_id = NEW.project_id AND e.upstream_id = NEW.job_id
           AND (ok OR e.allow_failure)
           AND w.project_id = e.project_id AND w.job_id = e.job_id
        RETURNING w.job_id, w.unmet
    ), rel AS (
        UPDATE nw_jobs.jobs j
           SET queue_at = greatest(NEW.finished_at,
                                   coalesce((j.doc->>'not_before')::double precision, 0)),
               doc = j.doc || jsonb_build_object('released_at', NEW.finished_at)
          FROM met
         WHERE met.unmet <= 0 AND j.project_id = NEW.project_id AND j.job_id = met.job_id
           AND j.finished_at IS NULL AND j.started_at IS NULL AND j.queue_at IS NULL
           AND j.au_status = 'pending' AND NOT j.cancel_requested
        RETURNING j.job_id
    )
    SELECT count(*) INTO released FROM rel;
    IF released > 0 THEN
        PERFORM pg_notify(nw_jobs.wake_channel(NEW.project_id), '');
    END IF;
    IF NOT ok THEN
        via := coalesce(NEW.doc->>'step', NEW.job_id);
        WITH RECURSIVE down(job_id) AS (
            SELECT e.job_id FROM nw_jobs.job_edges e
              JOIN nw_jobs.jobs d ON d.project_id = e.project_id AND d.job_id = e.job_id
             WHERE e.project_id = NEW.project_id AND e.upstream_id = NEW.job_id
               AND NOT e.allow_failure AND d.finished_at IS NULL AND d.started_at IS NULL
            UNION
            SELECT e.job_id FROM down
              JOIN nw_jobs.job_edges e
                ON e.project_id = NEW.project_id AND e.upstream_id = down.job_id
              JOIN nw_jobs.jobs d ON d.project_id = e.project_id AND d.job_id = e.job_id
             WHERE NOT e.allow_failure AND d.finished_at IS NULL AND d.started_at IS NULL
        )
        UPDATE nw_jobs.jobs j
           SET cancel_requested = true, au_status = 'cancelled', au_reason = 'upstream stopped',
               queue_at = NULL, finished_at = NEW.finished_at,
               doc = j.doc || jsonb_build_object(
                   'error', format('cancelled: upstream step %L %s', via,
                                   CASE WHEN NEW.state = 'failed' THEN 'failed'
                                        ELSE 'was cancelled' END),
                   'error_kind', 'cancelled',
                   'stopped_by', via)
          FROM down
         WHERE j.project_id = NEW.project_id AND j.job_id = down.job_id
           AND j.finished_at IS NULL AND j.started_at IS NULL;
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS jobs_settle_dependents ON nw_jobs.jobs;
CREATE TRIGGER jobs_settle_dependents
    AFTER UPDATE OF finished_at ON nw_jobs.jobs
    FOR EACH ROW WHEN (OLD.finished_at IS NULL AND NEW.finished_at IS NOT NULL
                       AND NEW.has_dependents)
    EXECUTE FUNCTION nw_jobs.settle_dependents();
