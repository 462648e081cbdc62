-- nw.jobs PostgreSQL store, migration 0009: pipeline steps of the in-process tier.
--
-- A step whose body runs in the process that enqueued it (`doc.runner`
-- 'inproc', formerly 'local') is started by that process when its upstreams
-- release it (nw/jobs/execution/step_waits.py): released, it gets its
-- `released_at` but no `queue_at`, so no worker claims it. The rule is one
-- function, `nw_jobs.release_due`, used by the settle trigger (replaced here:
-- its release's SET, and its reads, below) and by a create's release of steps whose
-- upstreams had ended already (postgres_pipelines.sql, `release_ids`).
--
-- The settle trigger is also rewritten to find what it touches by key,
-- whatever the tables' statistics. 0008's joins had cached generic plans
-- (plpgsql keeps one after 5 calls) that, with `jobs` analysed nearly empty,
-- read the project's live jobs through a partial index (`WHERE finished_at
-- IS NULL`) on `project_id` alone on every call, even when there was nothing
-- to release or stop: cancelling a 1 -> 1,000 -> 1 pipeline fired it 1,001
-- times at about 0.8 ms each (misc/bench/PERFORMANCE.md). Now:
-- * the ending job's edges are read by `job_edges`' primary key: how many
--   waits it meets, which dependents it stops; the waits are decremented by
--   key from those edges, as before, and only when it meets one;
-- * a dependent's state is read by a scalar subquery whose WHERE is `jobs`'
--   primary key alone, so no partial index can serve it; the stop-below walks
--   the edges down through a LATERAL (OFFSET 0: never made a join) from the
--   waiting dependents only, so a job whose dependents have all ended (every
--   step of a cancelled pipeline) costs two index probes;
-- * the releases and cancels are written only when there is one, in one
--   statement joined to the array of their ids (with stale statistics that
--   join may still hash the project's live jobs: once for a release or a
--   failure, no longer on every call);
-- * the function plans generically (`plan_cache_mode`): these plans do not
--   depend on the values, and custom plans were re-planned on every call
--   (their estimate for a one-element array beats the generic one's ten).
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
    ok     boolean := NEW.state = 'succeeded';
    meets  integer; -- how many dependents' waits it meets: all when it succeeded,
                    -- else those through allow_failure edges
    stops  text[];  -- the dependents it stops (when it did not succeed)
    ready  text[];  -- those of `meets` with no unmet upstream left
    doomed text[];  -- every waiting job below it through `stops`' kind of edge
    released integer;
    via    text;
BEGIN
    SELECT count(*) FILTER (WHERE ok OR e.allow_failure),
           array_agg(e.job_id ORDER BY e.job_id) FILTER (WHERE NOT ok AND NOT e.allow_failure)
      INTO meets, stops
      FROM nw_jobs.job_edges e
     WHERE e.project_id = NEW.project_id AND e.upstream_id = NEW.job_id;
    IF meets > 0 THEN
        -- each wait by its key from its edge (an = ANY (array) here read every
        -- wait of the project)
        WITH met AS (
            UPDATE nw_jobs.job_waits w SET unmet = w.unmet - 1
              FROM nw_jobs.job_edges e
             WHERE e.project_id = NEW.project_id AND e.upstream_id = NEW.job_id
               AND (ok OR e.allow_failure)
               AND w.project_id = e.project_id AND w.job_id = e.job_id
            RETURNING w.job_id, w.unmet
        )
        SELECT array_agg(met.job_id) INTO ready FROM met WHERE met.unmet <= 0;
    END IF;
    IF ready IS NOT NULL THEN
        UPDATE nw_jobs.jobs j
           SET queue_at = nw_jobs.release_due(j.doc, NEW.finished_at),
               doc = j.doc || jsonb_build_object('released_at', NEW.finished_at)
          FROM unnest(ready) r(job_id)
         WHERE j.project_id = NEW.project_id AND j.job_id = r.job_id
           AND j.finished_at IS NULL AND j.started_at IS NULL AND j.queue_at IS NULL
           AND j.au_status = 'pending' AND NOT j.cancel_requested;
        GET DIAGNOSTICS released = ROW_COUNT;
        IF released > 0 THEN
            PERFORM pg_notify(nw_jobs.wake_channel(NEW.project_id), '');
        END IF;
    END IF;
    IF stops IS NOT NULL THEN
        WITH RECURSIVE down(job_id) AS (
            SELECT s.job_id FROM unnest(stops) s(job_id)
             WHERE (SELECT d.finished_at IS NULL AND d.started_at IS NULL
                      FROM nw_jobs.jobs d
                     WHERE d.project_id = NEW.project_id AND d.job_id = s.job_id)
            UNION
            SELECT e.job_id
              FROM down CROSS JOIN LATERAL (
                   SELECT e.job_id FROM nw_jobs.job_edges e
                    WHERE e.project_id = NEW.project_id AND e.upstream_id = down.job_id
                      AND NOT e.allow_failure
                   OFFSET 0) e
             WHERE (SELECT d.finished_at IS NULL AND d.started_at IS NULL
                      FROM nw_jobs.jobs d
                     WHERE d.project_id = NEW.project_id AND d.job_id = e.job_id)
        )
        SELECT array_agg(down.job_id) INTO doomed FROM down;
    END IF;
    IF doomed IS NOT NULL THEN
        via := coalesce(NEW.doc->>'step', NEW.job_id);
        UPDATE nw_jobs.jobs j
           SET cancel_requested = true, au_status = 'cancelled', au_reason = 'upstream stopped',
               queue_at = NULL, finished_at = NEW.finished_at,
               doc = j.doc || jsonb_build_object(
                   'error', format('cancelled: upstream step %L %s', via,
                                   CASE WHEN NEW.state = 'failed' THEN 'failed'
                                        ELSE 'was cancelled' END),
                   'error_kind', 'cancelled',
                   'stopped_by', via)
          FROM unnest(doomed) s(job_id)
         WHERE j.project_id = NEW.project_id AND j.job_id = s.job_id
           AND j.finished_at IS NULL AND j.started_at IS NULL;
    END IF;
    RETURN NULL;
END
$$
SET plan_cache_mode = force_generic_plan;
