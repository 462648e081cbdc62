-- The PostgreSQL store's statements for parked provider jobs (the `parked`
-- table, migration 0007; nw/jobs/core/parked.py). Parameters are psycopg's
-- %(name)s; every statement is scoped to one project by %(project_id)s.

-- name: park
-- A park, fenced by the attempt in the same statement: the job is patched
-- (its `parked` and `resume` doc fields) and its row written only when the
-- job is on that attempt and unfinished; a webhook kept for this attempt is
-- kept (then it is due at once).
WITH j AS (
  UPDATE nw_jobs.jobs j SET doc = j.doc || %(doc)s::jsonb
   WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s
     AND j.attempt = %(attempt)s AND j.finished_at IS NULL
  RETURNING j.job_id
)
INSERT INTO nw_jobs.parked AS p (project_id, job_id, kind, attempt, request_id, due_at,
                                 look_until, polls, deadline_at, webhook)
SELECT %(project_id)s::text, j.job_id, %(kind)s::text, %(attempt)s::integer,
       %(request_id)s::text, %(due_at)s::double precision, 0, 0,
       %(deadline_at)s::double precision, NULL
  FROM j
ON CONFLICT (project_id, job_id) DO UPDATE
   SET kind = excluded.kind,
       request_id = excluded.request_id,
       deadline_at = excluded.deadline_at,
       polls = 0,
       look_until = 0,
       webhook = CASE WHEN p.attempt = excluded.attempt THEN p.webhook END,
       due_at = CASE WHEN p.attempt = excluded.attempt AND p.webhook IS NOT NULL
                     THEN %(now)s::double precision ELSE excluded.due_at END,
       attempt = excluded.attempt
RETURNING p.job_id;

-- name: look
-- The parked jobs of these kinds due for a look (their poll is due, a webhook
-- is kept for them, a cancel was asked or the deadline passed), not under
-- another poller's lease and not locked by one (SKIP LOCKED), whose job is
-- still on the attempt that parked and still parked; their lease taken for
-- one look, returned with the job's row.
WITH due AS (
  SELECT p.job_id
    FROM nw_jobs.parked p
    JOIN nw_jobs.jobs j ON j.project_id = p.project_id AND j.job_id = p.job_id
   WHERE p.project_id = %(project_id)s
     AND p.request_id IS NOT NULL AND p.look_until <= %(now)s
     AND (p.due_at <= %(now)s OR j.cancel_requested
          OR (p.deadline_at IS NOT NULL AND p.deadline_at <= %(now)s))
     AND p.kind = ANY(%(kinds)s::text[])
     AND j.attempt = p.attempt AND j.started_at IS NOT NULL AND j.finished_at IS NULL
     AND jsonb_typeof(j.doc->'parked') = 'object'
   ORDER BY p.due_at
   LIMIT %(limit)s
     FOR UPDATE OF p SKIP LOCKED
), taken AS (
  UPDATE nw_jobs.parked p SET look_until = %(until)s
    FROM due
   WHERE p.project_id = %(project_id)s AND p.job_id = due.job_id
  RETURNING p.job_id, p.request_id, p.polls, p.deadline_at, p.webhook, p.attempt
)
SELECT t.request_id AS p_request_id, t.polls AS p_polls, t.deadline_at AS p_deadline_at,
       t.webhook AS p_webhook, t.attempt AS p_attempt,
       j.job_id, j.created_at, j.kind, j.attempt, j.cancel_requested, j.started_at,
       j.finished_at, j.heartbeat_at, j.runner_id, j.doc,
       j.au_status AS status, j.au_value AS value, j.au_error AS error
  FROM taken t
  JOIN nw_jobs.jobs j ON j.project_id = %(project_id)s AND j.job_id = t.job_id;

-- name: repark
-- After a look that left the job parked: its next look, the lease let go; a
-- webhook applied by the look (%(seen)s) is dropped, one that came meanwhile
-- is kept and due at once.
UPDATE nw_jobs.parked
   SET polls = polls + 1,
       look_until = 0,
       due_at = CASE WHEN webhook IS NOT NULL AND webhook IS DISTINCT FROM %(seen)s::jsonb
                     THEN %(now)s::double precision ELSE %(due_at)s::double precision END,
       webhook = CASE WHEN webhook IS NOT DISTINCT FROM %(seen)s::jsonb THEN NULL
                      ELSE webhook END
 WHERE project_id = %(project_id)s AND job_id = %(job_id)s AND attempt = %(attempt)s;

-- name: repark_shown
-- What a parked job shows moved (its queue position, the provider's estimate):
-- its `parked` doc field replaced, fenced by the attempt.
UPDATE nw_jobs.jobs SET doc = jsonb_set(doc, '{parked}', %(parked)s::jsonb)
 WHERE project_id = %(project_id)s AND job_id = %(job_id)s AND attempt = %(attempt)s
   AND finished_at IS NULL;

-- name: keep_webhook
-- A webhook for the job's current, unfinished attempt: kept until a look
-- applies it, due at once (before the park is recorded the row has no request
-- id yet; the park keeps the payload). Nothing when the job is unknown,
-- finished or on another attempt; returns the row's request id.
WITH j AS (
  SELECT j.job_id, j.kind FROM nw_jobs.jobs j
   WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s
     AND j.attempt = %(attempt)s AND j.finished_at IS NULL
   FOR UPDATE
)
INSERT INTO nw_jobs.parked AS p (project_id, job_id, kind, attempt, request_id, due_at, webhook)
SELECT %(project_id)s::text, j.job_id, j.kind, %(attempt)s::integer, NULL,
       %(now)s::double precision, %(webhook)s::jsonb
  FROM j
ON CONFLICT (project_id, job_id) DO UPDATE
   SET webhook = excluded.webhook,
       due_at = excluded.due_at,
       request_id = CASE WHEN p.attempt = excluded.attempt THEN p.request_id END,
       attempt = excluded.attempt
RETURNING p.request_id;

-- name: parked_count
-- Jobs parked now (the /metrics gauge).
SELECT count(*) AS n
  FROM nw_jobs.parked p
  JOIN nw_jobs.jobs j ON j.project_id = p.project_id AND j.job_id = p.job_id
 WHERE p.project_id = %(project_id)s AND p.request_id IS NOT NULL
   AND j.attempt = p.attempt AND j.finished_at IS NULL AND j.started_at IS NOT NULL;

-- name: stale_parked
-- Rows whose job ended, went back to the queue or was deleted (a process
-- stopped between the job's write and the row's delete); their job ids.
DELETE FROM nw_jobs.parked p
 WHERE p.project_id = %(project_id)s AND p.due_at < %(before)s
   AND NOT EXISTS (SELECT 1 FROM nw_jobs.jobs j
                    WHERE j.project_id = p.project_id AND j.job_id = p.job_id
                      AND j.attempt = p.attempt AND j.finished_at IS NULL)
RETURNING p.job_id;
