-- nw.jobs PostgreSQL store, migration 0009: pipeline steps of the in-process tier.
--
-- A step whose body runs in the process that enqueued it (`doc.runner`
-- 'inproc', formerly 'local') is started by that process when its upstreams
-- release it (nw/jobs/execution/step_waits.py): released, it gets its
-- `released_at` but no `queue_at`, so no worker claims it. The rule is one
-- function, `nw_jobs.release_due`, used by the settle trigger (replaced here:
-- only its release's SET changes) and by a create's release of steps whose
-- upstreams had ended already (postgres_pipelines.sql, `release_ids`).
CREATE OR REPLACE FUNCTION nw_jobs.release_due(doc jsonb, at double precision)
RETURNS double precision
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN doc->>'runner' IN ('inproc', 'local') THEN NULL
                ELSE greatest(at, coalesce((doc->>'not_before')::double precision, 0))
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
           SET queue_at = nw_jobs.release_due(j.doc, NEW.finished_at),
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
