-- The embedded store's pipeline statements (tables pipelines, pipeline_steps,
-- job_edges: sqlite_schema.sql, version 7). Run by
-- nw/jobs/stores/pipelines_sqlite.py inside the store's write transactions:
-- a create's (the links of new jobs) and a job's end (`settle`: release
-- the dependents whose last upstream just ended, cancel the ones it stops).

-- fragment: release_due
-- A released job's `queue_at` (job `j`): due at :now or at its not_before,
-- for a worker to claim; none for a step whose body runs in the process that
-- enqueued it (`runner` inproc, formerly local): that process starts it
-- (nw/jobs/execution/step_waits.py), no worker may claim it.
CASE WHEN j.doc ->> 'runner' IN ('inproc', 'local') THEN NULL
     ELSE max(:now, coalesce(j.doc ->> 'not_before', 0)) END

-- name: put_pipeline
INSERT OR IGNORE INTO pipelines (pipeline_id, created_at, label, actor_id, doc)
VALUES (:pipeline_id, :created_at, :label, :actor_id, :doc);

-- name: put_steps
-- :steps is a JSON array of {step, job_id}.
INSERT OR IGNORE INTO pipeline_steps (pipeline_id, step, job_id)
SELECT :pipeline_id, value ->> 'step', value ->> 'job_id' FROM json_each(:steps);

-- name: put_edges
-- :edges is a JSON array of {upstream_id, job_id, step, allow_failure}.
INSERT OR IGNORE INTO job_edges (upstream_id, job_id, step, allow_failure)
SELECT value ->> 'upstream_id', value ->> 'job_id', value ->> 'step',
       coalesce(value ->> 'allow_failure', 0)
  FROM json_each(:edges);

-- name: upstream_states
-- The upstreams of a create's new waiting jobs, as they stand now (the
-- caller holds the write lock): their state as a job reads it.
SELECT j.job_id, j.finished_at, j.doc ->> 'step' AS step,
       CASE WHEN j.cancel_requested THEN 'cancelled'
            WHEN j.au_status = 'completed' THEN 'succeeded'
            ELSE j.au_status END AS state
  FROM jobs j
 WHERE j.job_id IN (SELECT value FROM json_each(:job_ids));

-- name: has_dependents
SELECT 1 FROM job_edges WHERE upstream_id = :job_id LIMIT 1;

-- name: ended
-- How a job that may have ended stands: finished, succeeded, its step name.
SELECT j.finished_at IS NOT NULL AS finished,
       (j.au_status = 'completed' AND NOT j.cancel_requested) AS ok,
       j.au_status AS status, j.doc ->> 'step' AS step
  FROM jobs j
 WHERE j.job_id = :job_id;

-- name: release
-- The dependents of the jobs in :ids (a JSON array) whose every upstream has
-- ended and succeeded (or may fail: allow_failure) become claimable, due at
-- :now or at their own not_before, and their records say when they were
-- released (`released_at`: a queued job with `after` and none reads
-- "waiting: after ..."). The file's one writer decides, so no count is kept:
-- the dependents' upstreams are read. Only waiting jobs move (queued, never
-- claimable yet, not started, not cancelled).
UPDATE jobs AS j
   SET queue_at = {{release_due}}, doc = json_set(j.doc, '$.released_at', :now)
 WHERE j.job_id IN (SELECT e.job_id FROM job_edges e
                     WHERE e.upstream_id IN (SELECT value FROM json_each(:ids)))
   AND j.au_status = 'pending' AND j.queue_at IS NULL
   AND j.started_at IS NULL AND j.finished_at IS NULL AND NOT j.cancel_requested
   AND NOT EXISTS (
       SELECT 1 FROM job_edges u
         JOIN jobs uj ON uj.job_id = u.upstream_id
        WHERE u.job_id = j.job_id
          AND NOT (uj.finished_at IS NOT NULL
                   AND ((uj.au_status = 'completed' AND NOT uj.cancel_requested)
                        OR u.allow_failure)))
RETURNING job_id;

-- name: doomed
-- The waiting jobs below :job_id through edges without allow_failure (any
-- depth): what its failure or cancel stops.
WITH RECURSIVE down(job_id) AS (
  SELECT e.job_id FROM job_edges e JOIN jobs d ON d.job_id = e.job_id
   WHERE e.upstream_id = :job_id AND NOT e.allow_failure
     AND d.finished_at IS NULL AND d.started_at IS NULL
  UNION
  SELECT e.job_id FROM down JOIN job_edges e ON e.upstream_id = down.job_id
    JOIN jobs d ON d.job_id = e.job_id
   WHERE NOT e.allow_failure AND d.finished_at IS NULL AND d.started_at IS NULL
)
SELECT job_id FROM down;

-- name: cancel_waiting
-- The waiting jobs :ids (unfinished: `doomed` read them in this transaction)
-- cancelled; :why is a JSON object (error, error_kind, stopped_by) merged
-- into each doc.
UPDATE jobs SET au_status = 'cancelled', au_reason = 'upstream stopped', queue_at = NULL,
                cancel_requested = 1, finished_at = :now, doc = json_patch(doc, :why)
 WHERE job_id IN (SELECT value FROM json_each(:ids)) AND finished_at IS NULL;

-- name: pipeline
SELECT pipeline_id, created_at, label, actor_id, doc FROM pipelines
 WHERE pipeline_id = :pipeline_id;

-- name: steps
SELECT step, job_id FROM pipeline_steps WHERE pipeline_id = :pipeline_id ORDER BY step;

-- name: release_ids
-- A create's new waiting jobs whose upstreams had all ended well already,
-- released as by `release`.
UPDATE jobs AS j
   SET queue_at = {{release_due}}, doc = json_set(j.doc, '$.released_at', :now)
 WHERE j.job_id IN (SELECT value FROM json_each(:ids)) AND j.au_status = 'pending'
   AND j.queue_at IS NULL
RETURNING job_id;

-- name: cancel_steps
-- Every unfinished step of a pipeline, as `request_cancel` cancels one (in
-- the store's write transaction): the cancel flag set and the au entry
-- cancelled; a queued one (waiting or claimable) finished at once with :why
-- (a JSON object: error, error_kind) merged into its record, a running one
-- left to stop (it reads `cancelling`, and its ending goes through the
-- outcome rules). Returns each step flagged and its finished_at (None: it
-- runs). Every right-hand side reads the row as it was.
UPDATE jobs
   SET cancel_requested = 1,
       finished_at = CASE WHEN au_status = 'pending' THEN :now ELSE finished_at END,
       doc = CASE WHEN au_status = 'pending' THEN json_patch(doc, :why) ELSE doc END,
       au_status = 'cancelled', au_reason = 'cancel requested', queue_at = NULL
 WHERE job_id IN (SELECT job_id FROM pipeline_steps WHERE pipeline_id = :pipeline_id)
   AND NOT cancel_requested AND au_status IN ('pending', 'running')
RETURNING job_id, finished_at;

-- name: settle_outside
-- Of the steps `cancel_steps` finished (:ids), those a job outside the
-- pipeline still waits on (`enqueue(after=...)`): each is settled as one
-- cancel settles it. Within the pipeline every dependent of a queued step was
-- queued too, and is finished by the same statement.
SELECT DISTINCT e.upstream_id FROM job_edges e JOIN jobs d ON d.job_id = e.job_id
 WHERE e.upstream_id IN (SELECT value FROM json_each(:ids)) AND d.finished_at IS NULL;
