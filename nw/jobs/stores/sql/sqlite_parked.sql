-- The embedded store's statements for parked provider jobs (the `parked`
-- table, schema version 6; nw/jobs/core/parked.py). Run inside the store's
-- write transaction (BEGIN IMMEDIATE), so a look's lease is taken under the
-- file's writer lock: two pollers never take one job.

-- name: park
-- A park (the fence was checked in the same transaction): the row is the
-- attempt's, its webhook kept only when it arrived for this attempt (then it
-- is due at once).
INSERT INTO parked (job_id, kind, attempt, request_id, due_at, look_until, polls,
                    deadline_at, webhook)
VALUES (:job_id, :kind, :attempt, :request_id, :due_at, 0, 0, :deadline_at, NULL)
ON CONFLICT (job_id) DO UPDATE
   SET kind = excluded.kind,
       request_id = excluded.request_id,
       deadline_at = excluded.deadline_at,
       polls = 0,
       look_until = 0,
       webhook = CASE WHEN parked.attempt = excluded.attempt THEN parked.webhook END,
       due_at = CASE WHEN parked.attempt = excluded.attempt AND parked.webhook IS NOT NULL
                     THEN :now ELSE excluded.due_at END,
       attempt = excluded.attempt;

-- name: look
-- The parked jobs of these kinds due for a look (their poll is due, a webhook
-- is kept for them, a cancel was asked or the deadline passed), not under
-- another poller's lease, whose job is still on the attempt that parked and
-- still parked: their lease taken for one look (under the file's writer
-- lock), returned with their due time (the store reads the jobs' rows next,
-- in the same transaction).
UPDATE parked SET look_until = :until
 WHERE job_id IN (
       SELECT p.job_id
         FROM parked p JOIN jobs j ON j.job_id = p.job_id
        WHERE p.request_id IS NOT NULL AND p.look_until <= :now
          AND (p.due_at <= :now OR j.cancel_requested = 1
               OR (p.deadline_at IS NOT NULL AND p.deadline_at <= :now))
          AND p.kind IN (SELECT value FROM json_each(:kinds))
          AND j.attempt = p.attempt AND j.started_at IS NOT NULL AND j.finished_at IS NULL
          AND (CASE WHEN json_valid(j.doc) THEN json_type(j.doc, '$.parked') END) = 'object'
        ORDER BY p.due_at
        LIMIT :limit)
RETURNING job_id, due_at, request_id AS p_request_id, polls AS p_polls,
          deadline_at AS p_deadline_at, webhook AS p_webhook, attempt AS p_attempt;

-- name: repark
-- After a look that left the job parked: its next look, the lease let go; a
-- webhook applied by the look (:seen) is dropped, one that came meanwhile is
-- kept and due at once.
UPDATE parked
   SET polls = polls + 1,
       look_until = 0,
       due_at = CASE WHEN webhook IS NOT NULL AND webhook IS NOT :seen THEN :now
                     ELSE :due_at END,
       webhook = CASE WHEN webhook IS :seen THEN NULL ELSE webhook END
 WHERE job_id = :job_id AND attempt = :attempt;

-- name: repark_shown
-- What a parked job shows moved (its queue position, the provider's estimate):
-- its `parked` doc field replaced, fenced by the attempt.
UPDATE jobs SET doc = json_set(doc, '$.parked', json(:parked))
 WHERE job_id = :job_id AND attempt = :attempt AND finished_at IS NULL AND json_valid(doc);

-- name: keep_webhook
-- A webhook for the job's current, unfinished attempt: kept until a look
-- applies it, due at once (before the park is recorded the row has no request
-- id yet; the park keeps the payload). Nothing when the job is unknown,
-- finished or on another attempt; returns the row's request id.
INSERT INTO parked (job_id, kind, attempt, request_id, due_at, webhook)
SELECT j.job_id, j.kind, :attempt, NULL, :now, :webhook
  FROM jobs j
 WHERE j.job_id = :job_id AND j.attempt = :attempt AND j.finished_at IS NULL
ON CONFLICT (job_id) DO UPDATE
   SET webhook = excluded.webhook,
       due_at = excluded.due_at,
       request_id = CASE WHEN parked.attempt = excluded.attempt THEN parked.request_id END,
       attempt = excluded.attempt
RETURNING request_id;

-- name: parked_count
-- Jobs parked now (the /metrics gauge).
SELECT count(*) AS n
  FROM parked p JOIN jobs j ON j.job_id = p.job_id
 WHERE p.request_id IS NOT NULL AND j.attempt = p.attempt AND j.finished_at IS NULL
   AND j.started_at IS NOT NULL;

-- name: stale_parked
-- Rows whose job ended, went back to the queue or was deleted (a process
-- stopped between the job's write and the row's delete); their job ids.
DELETE FROM parked
 WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.job_id = parked.job_id
                     AND j.attempt = parked.attempt AND j.finished_at IS NULL)
   AND due_at < :before
RETURNING job_id;
