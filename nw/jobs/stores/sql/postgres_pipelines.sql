-- The PostgreSQL store's pipeline statements (tables of migration 0008).
-- Run by nw/jobs/stores/pipelines_postgres.py: the links of a create's new
-- jobs inside its transaction, and the reads of a pipeline. Releasing and
-- cancelling dependents is the trigger's (jobs_settle_dependents, 0008).

-- name: put_pipeline
INSERT INTO nw_jobs.pipelines (project_id, pipeline_id, created_at, label, actor_id, doc)
VALUES (%(project_id)s, %(pipeline_id)s, %(created_at)s, %(label)s, %(actor_id)s, %(doc)s)
ON CONFLICT DO NOTHING;

-- name: put_steps
-- %(steps)s is a JSON array of {step, job_id}.
INSERT INTO nw_jobs.pipeline_steps (project_id, pipeline_id, step, job_id)
SELECT %(project_id)s, %(pipeline_id)s, x.step, x.job_id
  FROM jsonb_to_recordset(%(steps)s::jsonb) AS x(step text, job_id text)
ON CONFLICT DO NOTHING;

-- name: put_edges
-- %(edges)s is a JSON array of {upstream_id, job_id, step, allow_failure}; each
-- upstream is marked `has_dependents` (the settle trigger fires for those only).
WITH x AS (
  SELECT * FROM jsonb_to_recordset(%(edges)s::jsonb)
    AS x(upstream_id text, job_id text, step text, allow_failure boolean)
), e AS (
  INSERT INTO nw_jobs.job_edges (project_id, upstream_id, job_id, step, allow_failure)
  SELECT %(project_id)s, x.upstream_id, x.job_id, x.step, coalesce(x.allow_failure, false)
    FROM x
  ON CONFLICT DO NOTHING
)
UPDATE nw_jobs.jobs j SET has_dependents = true
 WHERE j.project_id = %(project_id)s AND NOT j.has_dependents
   AND j.job_id IN (SELECT x.upstream_id FROM x);

-- name: upstream_states
-- The upstreams of a create's new waiting jobs, locked (FOR SHARE: an
-- upstream's end waits for this create's commit, and its trigger then sees
-- the new edges), with their state and step name.
SELECT j.job_id, j.state, j.doc->>'step' AS step
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.job_id = ANY(%(job_ids)s::text[])
 ORDER BY j.job_id
   FOR SHARE;

-- name: put_waits
-- Each new waiting job's count of upstreams not ended (%(waits)s: a JSON
-- array of {job_id, unmet}); a retried job's count is set again.
INSERT INTO nw_jobs.job_waits (project_id, job_id, unmet)
SELECT %(project_id)s, x.job_id, x.unmet
  FROM jsonb_to_recordset(%(waits)s::jsonb) AS x(job_id text, unmet integer)
ON CONFLICT (project_id, job_id) DO UPDATE SET unmet = excluded.unmet;

-- name: release_ids
-- A create's new waiting jobs whose upstreams had all ended well already:
-- claimable now (or at their not_before; an in-process step is not: its
-- process starts it, migration 0009), and the workers woken.
WITH rel AS (
  UPDATE nw_jobs.jobs j
     SET queue_at = nw_jobs.release_due(j.doc, %(now)s),
         doc = j.doc || jsonb_build_object('released_at', %(now)s::double precision)
   WHERE j.project_id = %(project_id)s AND j.job_id = ANY(%(job_ids)s::text[])
     AND j.au_status = 'pending' AND j.queue_at IS NULL AND j.finished_at IS NULL
  RETURNING j.job_id
)
SELECT count(*) AS released,
       (SELECT pg_notify(nw_jobs.wake_channel(%(project_id)s), '')
          FROM (SELECT 1 FROM rel LIMIT 1) x) IS NULL AS notified
  FROM rel;

-- name: cancel_doomed
-- A create's new waiting jobs that an upstream already stopped: cancelled as
-- the trigger cancels them (%(why)s: a JSON object {job_id: doc fields}).
UPDATE nw_jobs.jobs j
   SET cancel_requested = true, au_status = 'cancelled', au_reason = 'upstream stopped',
       queue_at = NULL, finished_at = %(now)s, doc = j.doc || (%(why)s::jsonb -> j.job_id)
 WHERE j.project_id = %(project_id)s AND j.job_id = ANY(%(job_ids)s::text[])
   AND j.finished_at IS NULL;

-- name: pipeline
SELECT pipeline_id, created_at, label, actor_id, doc FROM nw_jobs.pipelines
 WHERE project_id = %(project_id)s AND pipeline_id = %(pipeline_id)s;

-- name: steps
SELECT step, job_id FROM nw_jobs.pipeline_steps
 WHERE project_id = %(project_id)s AND pipeline_id = %(pipeline_id)s
 ORDER BY step;
