-- The embedded store's statements (one SQLite file per project, see
-- sqlite_schema.sql). Loaded by nw.jobs.stores.sql.load_queries; parameters
-- are sqlite3's :name. A list parameter (kinds, job ids, keys) is bound as a
-- JSON array and read with json_each, so each statement has one text.
--
-- A job is one row of `jobs`: the columns of its record, the rest of the
-- record in `doc` (JSON text), and its au status entry in the `au_` columns
-- (read as status, value, error). A transition writes that one row (schema 8).

-- fragment: job_columns
-- The columns a job is read with: its record's columns, its doc, its au
-- status entry (read as `JobRow` by the store's `_row`).
j.job_id, j.created_at, j.kind, j.attempt, j.cancel_requested, j.started_at,
j.finished_at, j.heartbeat_at, j.runner_id, j.doc,
j.au_status AS status, j.au_value AS value, j.au_error AS error

-- fragment: job_state
-- A job's status as nw.jobs.core.status.job_status derives it (a job without
-- an unreadable doc reads as failed).
(CASE WHEN NOT json_valid(j.doc) THEN 'failed'
             WHEN j.cancel_requested THEN
               (CASE WHEN j.finished_at IS NULL THEN 'cancelling' ELSE 'cancelled' END)
             WHEN j.au_status = 'pending' THEN 'queued'
             WHEN j.au_status = 'running' THEN 'running'
             WHEN j.au_status = 'completed' THEN 'succeeded'
             ELSE j.au_status END)

-- fragment: job_grade
-- A job's outcome grade as nw.jobs.core.status.grade gives it (NULL while it
-- is not finished); the contract suite checks both agree.
(CASE WHEN NOT json_valid(j.doc) THEN 'error'
             WHEN j.cancel_requested AND j.finished_at IS NULL THEN NULL
             WHEN j.cancel_requested OR j.au_status = 'cancelled' THEN
               (CASE WHEN json_extract(j.doc, '$.error_kind') = 'cancelled'
                          AND coalesce(nullif(json_extract(j.doc, '$.error'), ''), j.au_error)
                              LIKE 'worker lost%'
                     THEN 'error' ELSE 'notice' END)
             WHEN j.au_status = 'completed' THEN
               (CASE WHEN j.au_value IS NULL OR j.au_value IN ('null', '[]', '{}', '""')
                     THEN 'warning' ELSE 'ok' END)
             WHEN j.au_status = 'failed' THEN
               (CASE WHEN json_extract(j.doc, '$.error_kind') = 'refused'
                     THEN 'warning' ELSE 'error' END)
             END)

-- fragment: page_filters
-- Every optional filter of a page (a null parameter filters nothing), the
-- cursor, the order and the size: each page query is its leading predicate
-- (the index it walks) and these.
   AND (:state IS NULL OR {{job_state}} = :state)
   AND (:kind IS NULL OR j.kind = :kind)
   AND (:actor_id IS NULL OR j.actor_id = :actor_id)
   AND (:q IS NULL OR instr(lower(CASE WHEN json_valid(j.doc)
                                       THEN coalesce(json_extract(j.doc, '$.label'), j.kind)
                                       ELSE 'unreadable job' END), lower(:q)) > 0)
   AND (:grade IS NULL OR {{job_grade}} = :grade)
   AND (j.created_at, j.job_id) < (coalesce(:before_at, 1e308), coalesce(:before_id, ''))
 ORDER BY j.created_at DESC, j.job_id DESC
 LIMIT :limit

-- name: get
-- One job.
SELECT {{job_columns}}
  FROM jobs j
 WHERE j.job_id = :job_id;

-- name: get_many
-- Several jobs (a pipeline's steps, a fan-in's upstreams).
SELECT {{job_columns}}
  FROM jobs j
 WHERE j.job_id IN (SELECT value FROM json_each(:job_ids));

-- name: page
-- Newest first (index jobs_by_created, walked from the cursor), with every
-- optional filter: a null parameter filters nothing. :state is the job
-- status: the CASE mirrors nw.jobs.status.job_status (a job with an
-- unreadable doc reads as failed); :grade mirrors
-- nw.jobs.status.grade as records.to_job calls it (the contract suite checks
-- both agree); :q is a case-insensitive substring of the label; the cursor
-- (:before_at, :before_id) is the created_at and id of the job a page ends
-- at: only older jobs follow (ties by id).
SELECT {{job_columns}}
  FROM jobs j
 WHERE 1 = 1
{{page_filters}};

-- name: page_by_actor
-- `page` of one actor (index jobs_by_actor).
SELECT {{job_columns}}
  FROM jobs j
 WHERE j.actor_id = :actor_id
{{page_filters}};

-- name: page_by_kind
-- `page` of one kind (index jobs_by_kind).
SELECT {{job_columns}}
  FROM jobs j
 WHERE j.kind = :kind
{{page_filters}};

-- name: live
-- Every unfinished job, oldest first (index jobs_unfinished).
SELECT {{job_columns}}
  FROM jobs j
 WHERE j.finished_at IS NULL
 ORDER BY j.created_at;

-- name: live_unclaimable
-- `live` without the jobs queued for a worker's claim (queue_at set): what a
-- reaper reads, since any worker will claim those (a backlog is not read).
SELECT {{job_columns}}
  FROM jobs j
 WHERE j.finished_at IS NULL AND j.queue_at IS NULL
 ORDER BY j.created_at;

-- name: change_mark
-- Moves when another connection commits (the web's watchers read the jobs
-- only then); reads no table.
PRAGMA data_version;

-- name: iter_ids
-- Job ids, newest first.
SELECT job_id FROM jobs ORDER BY created_at DESC;

-- fragment: job_insert
-- A whole record's columns and their values (put_job, put_record). A job
-- with a limit key, a priority or an actor gets `actor_seq` (fair share): one
-- past its actor's newest unfinished turn, and never behind the head of the
-- queue (a newcomer joins the rotation where it is now).
INSERT INTO jobs (job_id, created_at, kind, actor_id, attempt, cancel_requested,
                  started_at, finished_at, heartbeat_at, runner_id, doc,
                  limit_key, priority, actor_seq, queue_at)
VALUES (:job_id, :created_at, :kind, :actor_id, :attempt, :cancel_requested,
        :started_at, :finished_at, :heartbeat_at, :runner_id, :doc, :limit_key, :priority,
        max(coalesce((SELECT max(a.actor_seq) FROM jobs a
                       WHERE coalesce(a.actor_id, '') = coalesce(:actor_id, '')
                         AND a.finished_at IS NULL AND a.job_id <> :job_id), 0),
            coalesce((SELECT h.actor_seq FROM jobs h
                       WHERE h.queue_at IS NOT NULL AND h.job_id <> :job_id
                       ORDER BY h.priority DESC, h.actor_seq LIMIT 1), 1) - 1) + 1,
        :queue_at)

-- fragment: record_set
-- The SET list of a whole record written over its row (put_job, put_record).
created_at = excluded.created_at, kind = excluded.kind, actor_id = excluded.actor_id,
attempt = excluded.attempt, cancel_requested = excluded.cancel_requested,
started_at = excluded.started_at, finished_at = excluded.finished_at,
heartbeat_at = excluded.heartbeat_at, runner_id = excluded.runner_id,
doc = excluded.doc, limit_key = excluded.limit_key, priority = excluded.priority,
actor_seq = excluded.actor_seq

-- name: put_job
-- A new run of a job (insert, or replace the row of the same id): the whole
-- record, its au status pending (no result, no error), claimable by workers
-- from :queue_at when it is set.
{{job_insert}}
ON CONFLICT (job_id) DO UPDATE
   SET {{record_set}}, au_status = 'pending', au_value = NULL,
       au_error = NULL, au_reason = NULL, au_completed_at = NULL, queue_at = excluded.queue_at;

-- name: put_record
-- Upsert a whole record (unfenced: the index view's __setitem__; :queue_at
-- is null). A new job's au status is pending; an existing job keeps its au
-- status and its due time.
{{job_insert}}
ON CONFLICT (job_id) DO UPDATE
   SET {{record_set}};

-- name: can_start
-- Is the job queued and not cancelled (start's precondition)?
SELECT 1 AS ok FROM jobs
 WHERE job_id = :job_id AND au_status = 'pending' AND NOT cancel_requested;

-- name: claimable
-- The first due claimable jobs of these kinds in claim order (priority, the
-- actors' turns, age), passing over the keys in :skip_keys (full ones); the
-- caller holds the write lock (BEGIN IMMEDIATE), so no one else claims them.
-- Walks the claimable jobs in claim order on the partial index jobs_claim
-- (named: the plan never depends on the statistics), so a claim reads about
-- :limit rows however long the queue.
SELECT j.job_id, j.limit_key FROM jobs j INDEXED BY jobs_claim
 WHERE j.started_at IS NULL AND j.finished_at IS NULL
   AND j.queue_at IS NOT NULL AND j.queue_at <= :now AND j.au_status = 'pending'
   AND NOT j.cancel_requested AND j.kind IN (SELECT value FROM json_each(:kinds))
   AND (j.limit_key IS NULL OR j.limit_key NOT IN (SELECT value FROM json_each(:skip_keys)))
 ORDER BY j.priority DESC, j.actor_seq, j.created_at, j.job_id
 LIMIT :limit;

-- fragment: limit_running
-- How many jobs of limit `l`'s key run now (started, not finished).
(SELECT count(*) FROM jobs r
  WHERE r.limit_key = l.limit_key AND r.started_at IS NOT NULL AND r.finished_at IS NULL)

-- name: limit_rooms
-- Every limit of the project with its running count (started, not finished)
-- and its start log (read under the write lock, so the counts are exact).
SELECT l.limit_key, l.max_running, l.per_second, l.starts,
       {{limit_running}} AS running
  FROM limits l
 ORDER BY l.limit_key;

-- name: limits
-- Every limit with its running count and its starts in the last second
-- (as on PostgreSQL; `limit_rooms` is the claim's read, with the start log).
SELECT l.limit_key, l.max_running, l.per_second,
       {{limit_running}} AS running,
       (SELECT count(*) FROM json_each(l.starts) WHERE value > :now - 1.0) AS started_last_s
  FROM limits l
 ORDER BY l.limit_key;

-- name: note_starts
-- A key's start log after this claim (the caller trimmed it to the last second).
UPDATE limits SET starts = :starts, updated_at = :now WHERE limit_key = :key;

-- name: job_limit
-- The key of a job and its delay (in-process `start`).
SELECT limit_key, CASE WHEN json_valid(doc) THEN json_extract(doc, '$.not_before') END
         AS not_before FROM jobs
 WHERE job_id = :job_id;

-- name: set_limit
INSERT INTO limits (limit_key, max_running, per_second, updated_at)
VALUES (:key, :max_running, :per_second, :now)
ON CONFLICT (limit_key) DO UPDATE
   SET max_running = excluded.max_running, per_second = excluded.per_second,
       updated_at = excluded.updated_at;

-- name: delete_limit
DELETE FROM limits WHERE limit_key = :key;

-- name: queue_ahead
-- The claimable jobs in claim order with what a queued job's ETA needs.
SELECT j.job_id, j.limit_key, j.queue_at, j.priority,
       CASE WHEN json_valid(j.doc) THEN json_extract(j.doc, '$.eta_p50') END AS eta_p50,
       CASE WHEN json_valid(j.doc) THEN json_extract(j.doc, '$.eta_confidence') END
         AS eta_confidence
  FROM jobs j INDEXED BY jobs_claim
 WHERE j.started_at IS NULL AND j.finished_at IS NULL
   AND j.queue_at IS NOT NULL AND j.au_status = 'pending' AND NOT j.cancel_requested
 ORDER BY j.priority DESC, j.actor_seq, j.created_at, j.job_id
 LIMIT :limit;

-- name: start_job
-- The jobs :job_ids (a JSON array, chosen under the write lock) queued ->
-- running, in one statement however many: au status running (no longer
-- claimable), bumps the attempt (the lease counter), stamps started_at and a
-- first beat, names the runner, and appends the attempt to the record's
-- `attempts` (its number in the run, its lease, the
-- runner with the host and pid it announced, when it started; the outcome
-- closes it).
UPDATE jobs SET au_status = 'running', queue_at = NULL,
                attempt = attempt + 1, started_at = :now, heartbeat_at = :now,
                runner_id = :runner_id,
                doc = CASE WHEN NOT json_valid(doc) THEN doc ELSE json_insert(
                        CASE WHEN json_type(doc, '$.attempts') = 'array' THEN doc
                             ELSE json_set(doc, '$.attempts', json('[]')) END,
                        '$.attempts[#]',
                        json_object(
                          'attempt', attempt + 1 - coalesce(json_extract(doc, '$.attempt_base'), 0),
                          'lease', attempt + 1,
                          'runner_id', :runner_id,
                          'host', (SELECT json_extract(info, '$.host') FROM runners
                                    WHERE runner_id = :runner_id),
                          'pid', (SELECT json_extract(info, '$.pid') FROM runners
                                   WHERE runner_id = :runner_id),
                          'started_at', :now)) END
 WHERE job_id IN (SELECT value FROM json_each(:job_ids));

-- name: fence
-- The job's current attempt (a fenced write goes ahead only when it is the
-- caller's), whether it is finished (a requeue leaves it so), and its doc
-- (what a patch of doc fields merges into).
SELECT attempt, finished_at IS NOT NULL AS finished, doc FROM jobs WHERE job_id = :job_id;

-- fragment: patch_set
-- The SET list of a patch (see `patch`): the flagged columns and the doc.
kind = CASE WHEN :set_kind THEN :kind ELSE kind END,
       attempt = CASE WHEN :set_attempt THEN :attempt ELSE attempt END,
       cancel_requested = CASE WHEN :set_cancel_requested THEN :cancel_requested
                               ELSE cancel_requested END,
       started_at = CASE WHEN :set_started_at THEN :started_at ELSE started_at END,
       heartbeat_at = CASE WHEN :set_heartbeat_at THEN :heartbeat_at ELSE heartbeat_at END,
       runner_id = CASE WHEN :set_runner_id THEN :runner_id ELSE runner_id END,
       doc = CASE WHEN :doc IS NOT NULL THEN :doc
                  WHEN :doc_patch IS NOT NULL THEN json_patch(doc, :doc_patch)
                  ELSE doc END

-- name: patch
-- Record fields: a column is set when its :set_<column> flag is true (so a
-- null value clears it), else left as it is. Doc fields: :doc_patch (a JSON
-- object of scalars and arrays) is merged at the top level with json_patch;
-- a patch holding a null or an object (which json_patch would delete or
-- merge into) comes as :doc, the whole merged doc. One statement text
-- whatever the fields. The indexed
-- columns (created_at, actor_id, finished_at) are not here: SQLite rewrites
-- the index entries of every column a SET names, changed or not, so each has
-- its own statement, run only when a patch carries it.
UPDATE jobs
   SET {{patch_set}}
 WHERE job_id = :job_id;

-- name: patch_created_at
UPDATE jobs SET created_at = :created_at WHERE job_id = :job_id;

-- name: patch_actor_id
UPDATE jobs SET actor_id = :actor_id WHERE job_id = :job_id;

-- name: patch_finished_at
UPDATE jobs SET finished_at = :finished_at WHERE job_id = :job_id;

-- fragment: transition_finished_at
-- finished_at set by its flag in a transition's statement (a transition
-- finishing a job changes its index entries anyway).
finished_at = CASE WHEN :set_finished_at THEN :finished_at ELSE finished_at END

-- name: finish
-- running -> ended in one statement: the terminal au status entry (no longer
-- claimable) and the patch of the record's fields (see `patch`).
UPDATE jobs
   SET {{patch_set}},
       {{transition_finished_at}},
       au_status = :au_status, au_value = :value, au_error = :error,
       au_completed_at = :completed_at, queue_at = NULL
 WHERE job_id = :job_id;

-- name: requeue
-- Back to pending, due at :not_before, with the patch of the record's fields.
UPDATE jobs
   SET {{patch_set}},
       {{transition_finished_at}},
       au_status = 'pending', au_value = NULL, au_error = NULL, au_completed_at = NULL,
       queue_at = :not_before
 WHERE job_id = :job_id;

-- name: cancel
-- The au entry flipped to cancelled (the record's flag, in the patch, is the
-- intent), no longer claimable.
UPDATE jobs
   SET {{patch_set}},
       {{transition_finished_at}},
       au_status = 'cancelled', au_reason = 'cancel requested', queue_at = NULL
 WHERE job_id = :job_id;

-- name: beat_runner
-- A runner's beat never moves back (as on PostgreSQL, whatever order its beats commit in).
UPDATE runners SET beat_at = max(coalesce(beat_at, :now), :now) WHERE runner_id = :runner_id;

-- name: beat_jobs
-- Stamp the running jobs the runner still holds.
UPDATE jobs SET heartbeat_at = :now
 WHERE job_id IN (SELECT value FROM json_each(:job_ids))
   AND finished_at IS NULL AND runner_id = :runner_id;

-- name: jobs_to_stop
-- Among the runner's jobs, those it should stop: cancel requested, finished,
-- or taken over by another runner.
SELECT job_id FROM jobs
 WHERE job_id IN (SELECT value FROM json_each(:job_ids))
   AND (cancel_requested OR finished_at IS NOT NULL OR runner_id IS NOT :runner_id);

-- name: samples
-- The newest :window samples of each key, oldest first (ties in insertion order).
SELECT key, seconds
  FROM (SELECT key, seconds, at, rowid AS r,
               row_number() OVER (PARTITION BY key ORDER BY at DESC, rowid DESC) AS n
          FROM durations WHERE key IN (SELECT value FROM json_each(:keys)))
 WHERE n <= :window
 ORDER BY key, at, r;

-- name: add_sample
INSERT INTO durations (key, at, seconds) VALUES (:key, :now, :seconds);

-- name: prune_samples
-- One key down to its newest :window samples.
DELETE FROM durations
 WHERE key = :key
   AND rowid NOT IN (SELECT rowid FROM durations WHERE key = :key
                      ORDER BY at DESC, rowid DESC LIMIT :window);

-- name: append_progress
INSERT INTO progress (job_id, attempt, ts, pct, message, stage)
VALUES (:job_id, :attempt, :ts, :pct, :message, :stage);

-- name: progress
-- The newest :limit beats of a job's trail, newest first.
SELECT ts, pct, message, stage, attempt FROM progress
 WHERE job_id = :job_id
 ORDER BY seq DESC
 LIMIT :limit;

-- name: delete_progress
DELETE FROM progress WHERE job_id = :job_id;

-- name: register_runner
INSERT OR REPLACE INTO runners (runner_id, info, started_at, beat_at)
VALUES (:runner_id, :info, :now, :now);

-- name: unregister_runner
DELETE FROM runners WHERE runner_id = :runner_id;

-- name: runners
SELECT runner_id, info, started_at, beat_at FROM runners;

-- fragment: spend_sums
-- A set of jobs' committed spend (`spend`, `spend_by_actor`): a missing or
-- non-false lower-bound flag on a finished job that started makes the total
-- a lower bound; a figure that is not a JSON number counts as absent.
coalesce(sum(coalesce(CASE WHEN json_type(doc, '$.prior_actual_usd') IN ('integer', 'real')
                              THEN json_extract(doc, '$.prior_actual_usd') END, 0)
                    + coalesce(CASE WHEN json_type(doc, '$.earlier_runs_usd') IN ('integer', 'real')
                              THEN json_extract(doc, '$.earlier_runs_usd') END, 0)
                    + CASE WHEN finished_at IS NULL THEN 0
                           ELSE coalesce(CASE WHEN json_type(doc, '$.actual_usd') IN ('integer', 'real')
                              THEN json_extract(doc, '$.actual_usd') END, 0) END), 0.0)
         AS actual_usd,
       coalesce(max(finished_at IS NOT NULL AND started_at IS NOT NULL
                    AND json_extract(doc, '$.actual_is_lower_bound') IS NOT 0), 0)
         AS lower_bound,
       coalesce(sum(CASE WHEN finished_at IS NULL
                         THEN CASE WHEN json_type(doc, '$.estimated_usd') IN ('integer', 'real')
                              THEN json_extract(doc, '$.estimated_usd') END END), 0.0)
         AS live_estimated_usd,
       count(CASE WHEN finished_at IS NULL
                   AND coalesce(json_type(doc, '$.estimated_usd'), 'null') NOT IN ('integer', 'real')
                  THEN 1 END)
         AS live_unknown

-- name: spend
-- Committed spend in one pass. A missing or non-false lower-bound flag on a
-- finished job that started makes the total a lower bound. As on PostgreSQL, a
-- figure that is not a JSON number counts as absent, and a row whose doc is
-- not JSON (it reads failed, "unreadable") counts for nothing: one bad row
-- never breaks the sum for the others (json_valid first: the json functions
-- raise on a malformed doc).
SELECT {{spend_sums}}
  FROM jobs
 WHERE json_valid(doc);

-- name: spend_by_actor
-- One actor's spend over a rolling window (as `spend`, over the jobs created
-- at or after :since by this actor; index jobs_by_actor).
SELECT {{spend_sums}}
  FROM jobs
 WHERE actor_id = :actor_id AND created_at >= :since AND json_valid(doc);

-- name: delete_job
DELETE FROM jobs WHERE job_id = :job_id;

-- name: get_status
-- One job's au status entry (the status view's __getitem__): its au columns,
-- created when the job was (epoch seconds), at the job's attempt.
SELECT au_status AS status, au_value AS value, au_error AS error,
       au_reason AS terminal_reason, created_at, au_completed_at AS completed_at, attempt
  FROM jobs WHERE job_id = :job_id;

-- name: put_status
-- Write a job's au status entry (the status view's __setitem__); not
-- claimable. Nothing for a job not in the store (no row written).
UPDATE jobs
   SET au_status = :status, au_value = :value, au_error = :error,
       au_reason = :terminal_reason, au_completed_at = :completed_at, queue_at = NULL
 WHERE job_id = :job_id;

-- name: finished_before
-- The oldest finished jobs that finished before :cutoff (index
-- jobs_by_finished): what `prune` rolls up and deletes, a batch at a time.
SELECT {{job_columns}}, j.actor_id
  FROM jobs j
 WHERE j.finished_at IS NOT NULL AND j.finished_at < :cutoff
 ORDER BY j.finished_at, j.job_id
 LIMIT :limit;

-- name: add_rollup
-- Fold pruned jobs into their day's rollup row.
INSERT INTO spend_rollup (day, kind, actor_id, status, grade, jobs, usd, lower_bound)
VALUES (:day, :kind, :actor_id, :status, :grade, :jobs, :usd, :lower_bound)
ON CONFLICT (day, kind, actor_id, status, grade) DO UPDATE
   SET jobs = jobs + excluded.jobs, usd = usd + excluded.usd,
       lower_bound = max(lower_bound, excluded.lower_bound);

-- name: rollup_spend
-- What pruned jobs spent (added to `spend`: a budget counts it).
SELECT coalesce(sum(usd), 0.0) AS usd, coalesce(max(lower_bound), 0) AS lower_bound
  FROM spend_rollup;

-- name: rollup_spend_by_actor
-- What one actor's pruned jobs spent since the day of :since (the rollup is
-- by day: a pruned job counts for its whole finishing day).
SELECT coalesce(sum(usd), 0.0) AS usd, coalesce(max(lower_bound), 0) AS lower_bound
  FROM spend_rollup
 WHERE actor_id = :actor_id AND day >= :since_day;

-- name: spend_since
-- Spend of the jobs finished since :since (index jobs_by_finished) by kind
-- and actor, split at :today (a run's spend counts on the day it finished,
-- earlier attempts and runs included).
SELECT j.kind, coalesce(j.actor_id, '') AS actor_id, j.finished_at >= :today AS today,
       sum(coalesce(CASE WHEN json_type(j.doc, '$.prior_actual_usd') IN ('integer', 'real')
                              THEN json_extract(j.doc, '$.prior_actual_usd') END, 0)
           + coalesce(CASE WHEN json_type(j.doc, '$.earlier_runs_usd') IN ('integer', 'real')
                              THEN json_extract(j.doc, '$.earlier_runs_usd') END, 0)
           + coalesce(CASE WHEN json_type(j.doc, '$.actual_usd') IN ('integer', 'real')
                              THEN json_extract(j.doc, '$.actual_usd') END, 0)) AS usd,
       coalesce(max(j.started_at IS NOT NULL
                    AND json_extract(j.doc, '$.actual_is_lower_bound') IS NOT 0), 0) AS lower_bound
  FROM jobs j
 WHERE j.finished_at IS NOT NULL AND j.finished_at >= :since AND json_valid(j.doc)
 GROUP BY 1, 2, 3;

-- name: rollup_since
-- The rollup's share of `spend_since` (days as 'YYYY-MM-DD', UTC).
SELECT kind, actor_id, day >= :today_day AS today, sum(usd) AS usd,
       max(lower_bound) AS lower_bound
  FROM spend_rollup
 WHERE day >= :since_day
 GROUP BY 1, 2, 3;

-- name: counts
-- How many jobs by status and grade (the CASEs of `page`).
SELECT {{job_state}} AS state,
       {{job_grade}} AS grade,
       count(*) AS n
  FROM jobs j
 GROUP BY 1, 2;

-- name: rollup_counts
-- How many pruned jobs by status and grade.
SELECT status AS state, grade, sum(jobs) AS n FROM spend_rollup GROUP BY 1, 2;

-- name: durations
-- Finished jobs that ran, by kind: how many, their seconds in all, and how
-- many took at most each of the ten bounds :b0 .. :b9 (cumulative histogram
-- buckets; one pass, a column per bound). `+kind` keeps SQLite from walking
-- jobs_by_kind (and every doc) to save a sort of a few kinds: the covering
-- jobs_by_finished is read instead.
SELECT kind, count(*) AS n, sum(finished_at - started_at) AS seconds,
       sum(finished_at - started_at <= :b0) AS b0,
       sum(finished_at - started_at <= :b1) AS b1,
       sum(finished_at - started_at <= :b2) AS b2,
       sum(finished_at - started_at <= :b3) AS b3,
       sum(finished_at - started_at <= :b4) AS b4,
       sum(finished_at - started_at <= :b5) AS b5,
       sum(finished_at - started_at <= :b6) AS b6,
       sum(finished_at - started_at <= :b7) AS b7,
       sum(finished_at - started_at <= :b8) AS b8,
       sum(finished_at - started_at <= :b9) AS b9
  FROM jobs
 WHERE finished_at IS NOT NULL AND started_at IS NOT NULL
 GROUP BY +kind;

-- name: budgets
-- The project's budgets (the spend policy, nw/jobs/budgets.py), by key.
SELECT budget_key, usd, per, actor_id, kind, updated_at FROM budgets ORDER BY budget_key;

-- name: set_budget
INSERT INTO budgets (budget_key, usd, per, actor_id, kind, updated_at)
VALUES (:key, :usd, :per, :actor_id, :kind, :now)
ON CONFLICT (budget_key) DO UPDATE
   SET usd = excluded.usd, updated_at = excluded.updated_at;

-- name: delete_budget
DELETE FROM budgets WHERE budget_key = :key;

-- name: approval
-- The project's approval policy (no row: the caller's config decides).
SELECT threshold_usd, mode, updated_at FROM approval WHERE one = 1;

-- name: set_approval
INSERT INTO approval (one, threshold_usd, mode, updated_at)
VALUES (1, :threshold_usd, :mode, :now)
ON CONFLICT (one) DO UPDATE
   SET threshold_usd = excluded.threshold_usd, mode = excluded.mode,
       updated_at = excluded.updated_at;

-- name: budget_spend
-- A budget's committed spend, as `spend` but over the jobs it counts: of
-- :actor_id and :kind when given (NULL: every one), finished at or after
-- :since (NULL: all time) or still live (a live job's estimate is spent now).
-- Guarded as `spend` is: a doc that is not JSON counts for nothing, a figure
-- that is not a JSON number as absent.
SELECT {{spend_sums}}
  FROM jobs
 WHERE (:since IS NULL OR finished_at IS NULL OR finished_at >= :since)
   AND (:actor_id IS NULL OR actor_id = :actor_id)
   AND (:kind IS NULL OR kind = :kind)
   AND json_valid(doc);

-- name: budget_rollup_spend
-- What the pruned jobs a budget counts spent, from the UTC day :since_day on
-- (NULL: all time; a calendar window starts at a day's start, so the per-day
-- rollup counts exactly what the window holds).
SELECT coalesce(sum(usd), 0.0) AS usd, coalesce(max(lower_bound), 0) AS lower_bound
  FROM spend_rollup
 WHERE (:since_day IS NULL OR day >= :since_day)
   AND (:actor_id IS NULL OR actor_id = :actor_id)
   AND (:kind IS NULL OR kind = :kind);

-- name: quoted_and_billed
-- The newest :limit finished runs that were quoted and billed (a number in
-- both), for the quote-against-bill accuracy (nw/jobs/accuracy.py).
SELECT kind, finished_at,
       json_extract(doc, '$.estimated_usd') AS quoted_usd,
       coalesce(CASE WHEN json_type(doc, '$.prior_actual_usd') IN ('integer', 'real')
                     THEN json_extract(doc, '$.prior_actual_usd') END, 0)
         + json_extract(doc, '$.actual_usd') AS billed_usd,
       json_extract(doc, '$.params.model') AS model,
       json_extract(doc, '$.params.plan.calls') AS calls
  FROM jobs INDEXED BY jobs_by_finished
 WHERE finished_at IS NOT NULL AND finished_at >= :since
   AND CASE WHEN json_valid(doc)  -- a doc that is not JSON is passed over, not an error
            THEN json_type(doc, '$.estimated_usd') IN ('integer', 'real')
                 AND json_type(doc, '$.actual_usd') IN ('integer', 'real')
            ELSE 0 END
   AND (:kind IS NULL OR kind = :kind)
 ORDER BY finished_at DESC
 LIMIT :limit;

-- name: policy
-- The whole spend policy in one read: a row per budget, then the approval row.
SELECT 'budget' AS what, budget_key, usd, per, actor_id, kind,
       NULL AS threshold_usd, NULL AS mode
  FROM budgets
UNION ALL
SELECT 'approval', NULL, NULL, NULL, NULL, NULL, threshold_usd, mode
  FROM approval WHERE one = 1;

-- name: count_finished_before
-- How many jobs `prune` would delete with this :cutoff (a dry run; index
-- jobs_by_finished).
SELECT count(*) AS n FROM jobs WHERE finished_at IS NOT NULL AND finished_at < :cutoff;
