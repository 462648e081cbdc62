-- The PostgreSQL store's statements (schema nw_jobs, see pg_migrations/).
-- Loaded by nw.jobs.stores.sql.load_queries; parameters are psycopg's
-- %(name)s. Every statement is scoped to one project by %(project_id)s.
--
-- A job is one row of `jobs`: the columns of its record, the rest of the
-- record in `doc`, and its au status entry in the `au_` columns (read as
-- status, value, error). A transition writes that one row (migration 0004).

-- fragment: job_columns
-- The columns a job is read with: its record's columns, its doc, its au
-- status entry (read as `JobRow` by the store's `_row`).
j.job_id, j.created_at, j.kind, j.attempt, j.cancel_requested, j.started_at,
j.finished_at, j.heartbeat_at, j.runner_id, j.doc,
j.au_status AS status, j.au_value AS value, j.au_error AS error

-- fragment: page_filters
-- Every optional filter of a page (a null parameter filters nothing), the
-- cursor, the order and the size: each page query is its leading predicate
-- (the index it walks) and these. The grade is the database function of
-- migration 0006 (nw_jobs.grade: one definition, inlined by the planner).
   AND (%(state)s::text IS NULL
        OR j.state = %(state)s::text)
   AND (%(kind)s::text IS NULL OR j.kind = %(kind)s::text)
   AND (%(actor_id)s::text IS NULL OR j.actor_id = %(actor_id)s::text)
   AND (%(q)s::text IS NULL
        OR strpos(lower(coalesce(j.doc->>'label', j.kind)), lower(%(q)s::text)) > 0)
   AND (%(grade)s::text IS NULL OR nw_jobs.grade(j.state, j.doc, j.au_error, j.au_value) = %(grade)s::text)
   AND (j.created_at, j.job_id) < (coalesce(%(before_at)s::double precision, 'Infinity'),
                                    coalesce(%(before_id)s::text, ''))
 ORDER BY j.created_at DESC, j.job_id DESC
 LIMIT %(limit)s

-- fragment: start_attempt
-- Start an attempt (the SET list of every statement that starts a job: the
-- claim, a start by id, the limited start, a finish's folded claim): bump the
-- attempt (the lease counter), running, stamped and beating, the runner named,
-- and the attempt appended to the record's `attempts` (its number in the run,
-- its lease, the runner with the host and pid it announced as `r`, when it
-- started; the outcome closes it).
attempt = j.attempt + 1, au_status = 'running', started_at = %(now)s,
heartbeat_at = %(now)s, runner_id = %(runner_id)s, lease = %(lease)s, queue_at = NULL,
doc = jsonb_set(j.doc, '{attempts}',
coalesce(CASE WHEN jsonb_typeof(j.doc->'attempts') = 'array'
THEN j.doc->'attempts' END, '[]'::jsonb)
|| jsonb_build_array(jsonb_build_object(
'attempt', j.attempt + 1 - coalesce((j.doc->>'attempt_base')::integer, 0),
'lease', j.attempt + 1,
'runner_id', %(runner_id)s::text,
'host', r.info->'host',
'pid', r.info->'pid',
'started_at', %(now)s::double precision)))

-- fragment: patch_columns
-- The column fields a patch sets, from `p.c` (a JSON object of column fields:
-- a key that is absent leaves its column unchanged, one present with null
-- clears it): what `patch`, `requeue` and the finishes write of a record's
-- columns (nw/jobs/stores/columns.py declares them).
created_at = CASE WHEN p.c ? 'created_at' THEN (p.c->>'created_at')::double precision ELSE j.created_at END,
kind = CASE WHEN p.c ? 'kind' THEN p.c->>'kind' ELSE j.kind END,
idempotency_key = CASE WHEN p.c ? 'idempotency_key' THEN p.c->>'idempotency_key' ELSE j.idempotency_key END,
actor_id = CASE WHEN p.c ? 'actor_id' THEN p.c->>'actor_id' ELSE j.actor_id END,
attempt = CASE WHEN p.c ? 'attempt' THEN (p.c->>'attempt')::integer ELSE j.attempt END,
cancel_requested = CASE WHEN p.c ? 'cancel_requested' THEN (p.c->>'cancel_requested')::boolean ELSE j.cancel_requested END,
started_at = CASE WHEN p.c ? 'started_at' THEN (p.c->>'started_at')::double precision ELSE j.started_at END,
finished_at = CASE WHEN p.c ? 'finished_at' THEN (p.c->>'finished_at')::double precision ELSE j.finished_at END,
heartbeat_at = CASE WHEN p.c ? 'heartbeat_at' THEN (p.c->>'heartbeat_at')::double precision ELSE j.heartbeat_at END,
runner_id = CASE WHEN p.c ? 'runner_id' THEN p.c->>'runner_id' ELSE j.runner_id END

-- fragment: limit_running
-- How many jobs of limit `l`'s key run now, database-wide (started, not
-- finished: a finish, requeue or reap lets a slot go by the write it makes).
(SELECT count(*) FROM nw_jobs.jobs r
  WHERE r.limit_key = l.limit_key AND r.started_at IS NOT NULL AND r.finished_at IS NULL)

-- fragment: limit_recent_starts
-- How many of limit `l`'s starts fall in the last second (its `per_second`
-- window, limits.RATE_WINDOW_S).
(SELECT count(*) FROM unnest(l.starts) t WHERE t > %(now)s - 1.0)

-- fragment: start_picked
-- The jobs of `picked` (a CTE before it: locked, each with `held`) that are
-- not held start their attempt (`start_attempt`, the runner's host and pid
-- from its row); `jb` returns their new rows. Every statement that starts
-- jobs ends its choice with this: a claim, a start by id, the limited start.
jb AS (
  UPDATE nw_jobs.jobs j
     SET {{start_attempt}}
    FROM picked
    LEFT JOIN nw_jobs.runners r
      ON r.project_id = %(project_id)s AND r.runner_id = %(runner_id)s
   WHERE j.project_id = %(project_id)s AND j.job_id = picked.job_id AND NOT picked.held
  RETURNING j.*
)

-- fragment: claim_pick
-- A claim's choice and start (`claim`, `finish_many_and_claim`): the first
-- :limit due jobs of these kinds in claim order (priority, the actors' turns,
-- age), passing over the keys in `blocked` (a CTE before it), locked SKIP
-- LOCKED; those whose key has a limit come back `held` (started later under
-- the key's lock), the others start their attempt (`jb`).
picked AS (
  SELECT j.job_id, j.limit_key,
         EXISTS (SELECT 1 FROM nw_jobs.limits l WHERE l.limit_key = j.limit_key) AS held,
         row_number() OVER () AS n
    FROM (SELECT job_id, limit_key FROM nw_jobs.jobs
           WHERE project_id = %(project_id)s AND queue_at IS NOT NULL AND queue_at <= %(now)s
             AND kind = ANY(%(kinds)s::text[]) AND NOT cancel_requested
             AND (limit_key IS NULL OR limit_key NOT IN (SELECT limit_key FROM blocked))
           ORDER BY priority DESC, actor_seq, created_at, job_id
           LIMIT %(limit)s
             FOR UPDATE SKIP LOCKED) j
), {{start_picked}}

-- fragment: finish_batch
-- A batch of terminal writes (`finish_many`, `finish_many_and_claim`):
-- %(batch)s is a JSON array of {job_id, attempt, au_status, value, error,
-- cols, doc}, each fenced by its attempt and patched as by `patch`, its au
-- status entry written with it; `fj` returns the ids written.
p AS (
  SELECT x.*, x.cols AS c FROM jsonb_to_recordset(%(batch)s::jsonb)
      AS x(job_id text, attempt integer, au_status text, value jsonb, error text,
           cols jsonb, doc jsonb)
), fj AS (
  UPDATE nw_jobs.jobs j
     SET {{patch_columns}},
         doc = j.doc || p.doc,
         au_status = p.au_status, au_value = p.value, au_error = p.error,
         au_completed_at = now(),
         queue_at = NULL
    FROM p
   WHERE j.project_id = %(project_id)s AND j.job_id = ANY(%(job_ids)s::text[])
     AND j.job_id = p.job_id AND j.attempt = coalesce(p.attempt, j.attempt)
  RETURNING j.job_id
)

-- name: get
-- One job.
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s;

-- name: get_many
-- Several jobs (a pipeline's steps, a fan-in's upstreams).
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.job_id = ANY(%(job_ids)s::text[]);

-- name: lock
-- `create` found the job: lock its row to decide. After waiting for the lock,
-- PostgreSQL re-reads the locked row, so liveness is decided from what the
-- last transition wrote: `state` (generated from `au_status`) and `au_status`.
SELECT {{job_columns}}, j.state
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s
   FOR UPDATE OF j;

-- name: by_lease
-- The jobs a claim or start took under its lease token: a retry whose first
-- try committed before its reply was lost recovers them instead of claiming more.
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.lease = %(lease)s
 ORDER BY j.job_id;

-- name: page
-- Newest first (index jobs_page, walked from the cursor), with every optional
-- filter: a null parameter filters nothing. `state` is generated as
-- nw.jobs.status.job_status derives it; the grade CASE mirrors
-- nw.jobs.status.grade as records.to_job calls it (the contract suite checks
-- both agree); %(q)s is a case-insensitive substring of the label; the cursor
-- (%(before_at)s, %(before_id)s) is the created_at and id of the job a page
-- ended at: only older jobs follow (ties by id).
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s
{{page_filters}};

-- name: page_by_state
-- `page` of one job status (index jobs_state).
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.state = %(state)s::text
{{page_filters}};

-- name: page_by_actor
-- `page` of one actor (index jobs_actor).
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.actor_id = %(actor_id)s::text
{{page_filters}};

-- name: page_by_kind
-- `page` of one kind (index jobs_kind).
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.kind = %(kind)s::text
{{page_filters}};

-- name: live
-- Every unfinished job, oldest first (index jobs_live).
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.finished_at IS NULL
 ORDER BY j.created_at, j.job_id;

-- name: live_unclaimable
-- `live` without the jobs queued for a worker's claim (queue_at set): what a
-- reaper reads, since any worker will claim those (a backlog is not read).
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.finished_at IS NULL AND j.queue_at IS NULL
 ORDER BY j.created_at, j.job_id;

-- name: change_mark
-- Moves on every write to the project's jobs (the web's watchers read the
-- jobs only then; a progress beat patches the job too): a written row
-- version has a newer xmin, so the sum grows; a deleted row lowers the
-- count. One scan of the project's rows, no row decoded.
SELECT count(*) AS jobs, coalesce(sum(xmin::text::bigint), 0) AS jobs_xmin
  FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s;

-- name: iter_ids
-- Job ids, newest first.
SELECT job_id FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s
 ORDER BY created_at DESC, job_id DESC;

-- fragment: queue_head
-- The turn just before the head of the project's queue (fair share: a
-- newcomer's first turn is never behind it).
coalesce((SELECT h.actor_seq FROM nw_jobs.jobs h
           WHERE h.project_id = %(project_id)s AND h.queue_at IS NOT NULL
           ORDER BY h.priority DESC, h.actor_seq LIMIT 1), 1) - 1

-- fragment: actor_turn
-- A new job's `actor_seq`: one past its actor's newest unfinished turn, and
-- never behind the head of the queue (`create`, `replace`; `create_many`
-- reads both once per actor of its batch).
(SELECT greatest(
   coalesce((SELECT a.actor_seq FROM nw_jobs.jobs a
              WHERE a.project_id = %(project_id)s AND a.finished_at IS NULL
                AND coalesce(a.actor_id, '') = coalesce(%(actor_id)s, '')
              ORDER BY a.actor_seq DESC LIMIT 1), 0),
   {{queue_head}}) + 1)

-- name: lock_project_creates
-- Serialises the creates of one project for the length of a transaction (the
-- budget gate reads the committed spend inside it).
SELECT pg_advisory_xact_lock(hashtext(%(project_id)s));

-- name: create
-- Put-if-absent: the primary key (project_id, job_id) is the dedup constraint.
-- `actor_seq` (fair share): one past the actor's newest unfinished turn, and
-- never behind the head of the queue (a newcomer joins the rotation at the
-- head instead of jumping ahead of everyone, or waiting behind a backlog).
-- A new job is queued (au pending); a claimable one
-- (queue_at set) notifies the project's channel in the same statement, so
-- idle workers wake at commit. Returns (inserted, notified) counts.
WITH jb AS (
  INSERT INTO nw_jobs.jobs (project_id, job_id, created_at, kind, idempotency_key, actor_id,
                            attempt, cancel_requested, started_at, finished_at, heartbeat_at,
                            runner_id, doc, au_status, queue_at, limit_key, priority,
                            actor_seq)
  VALUES (%(project_id)s, %(job_id)s, %(created_at)s, %(kind)s, %(idempotency_key)s,
          %(actor_id)s, %(attempt)s, %(cancel_requested)s, %(started_at)s, %(finished_at)s,
          %(heartbeat_at)s, %(runner_id)s, %(doc)s, 'pending', %(queue_at)s, %(limit_key)s,
          %(priority)s, {{actor_turn}})
  ON CONFLICT (project_id, job_id) DO NOTHING
  RETURNING job_id
)
SELECT (SELECT count(*) FROM jb) AS inserted,
       (SELECT count(*) FROM (SELECT pg_notify(%(channel)s, %(kind)s) FROM jb
                               WHERE %(queue_at)s::double precision IS NOT NULL) n) AS notified;

-- name: replace
-- A finished job (locked by `lock`) is replaced by a new run: every record
-- column, a fresh au status entry (pending), no progress trail. Notifies
-- like `create`.
WITH jb AS (
  UPDATE nw_jobs.jobs j
     SET (project_id, job_id, created_at, kind, idempotency_key, actor_id, attempt,
          cancel_requested, started_at, finished_at, heartbeat_at, runner_id, doc,
          au_status, au_value, au_error, au_reason, au_completed_at, queue_at, lease,
          limit_key, priority, actor_seq)
       = (%(project_id)s, %(job_id)s, %(created_at)s, %(kind)s, %(idempotency_key)s,
          %(actor_id)s, %(attempt)s, %(cancel_requested)s, %(started_at)s, %(finished_at)s,
          %(heartbeat_at)s, %(runner_id)s, %(doc)s, 'pending', NULL, NULL, NULL, NULL,
          %(queue_at)s, NULL,
          %(limit_key)s, %(priority)s, {{actor_turn}})
   WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s
  RETURNING j.job_id
), pb AS (
  DELETE FROM nw_jobs.progress WHERE project_id = %(project_id)s AND job_id = %(job_id)s
)
SELECT count(*) AS notified
  FROM (SELECT pg_notify(%(channel)s, %(kind)s) FROM jb
         WHERE %(queue_at)s::double precision IS NOT NULL) n;

-- name: lock_many
-- `create_many`: the batch's existing rows, locked in job id order (a batch is
-- inserted in that order too, so two overlapping batches cannot deadlock);
-- liveness is decided from the locked rows' own columns, as for `lock`.
SELECT {{job_columns}}, j.state
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.job_id = ANY(%(job_ids)s::text[])
 ORDER BY j.job_id
   FOR UPDATE OF j;

-- name: create_many
-- The new jobs of a batch in one statement: the batch is one JSON array of
-- rows (one parameter however many jobs), inserted in job id order; a row's
-- document is the fields the batch shares (%(shared)s, sent once: pg_batch.py)
-- and its own. Each is
-- queued (au pending) with its limit key, priority and due time as by
-- `create`; its `actor_seq` as `create` computes it, read once per actor of
-- the batch (not per row), a batch's jobs of one actor taking consecutive
-- turns from that base in batch order (%(n)s), as one create after another
-- would. A row whose job id exists is skipped (ON CONFLICT DO NOTHING), its
-- turn left unused. One NOTIFY for the batch when any new job is claimable
-- (queue_at set). Returns (inserted, notified) counts and `skipped`, the job
-- ids not inserted (NULL when none was).
WITH x AS (
  SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb)
    AS x(job_id text, created_at double precision, kind text, idempotency_key text,
         actor_id text, attempt integer, runner_id text, doc jsonb,
         queue_at double precision, limit_key text, priority integer, n integer)
), head AS (
  SELECT {{queue_head}} AS seq
), base AS MATERIALIZED (
  SELECT w.actor, greatest(
           coalesce((SELECT a.actor_seq FROM nw_jobs.jobs a
                      WHERE a.project_id = %(project_id)s AND a.finished_at IS NULL
                        AND coalesce(a.actor_id, '') = w.actor
                      ORDER BY a.actor_seq DESC LIMIT 1), 0),
           (SELECT seq FROM head)) AS seq
    FROM (SELECT DISTINCT coalesce(actor_id, '') AS actor FROM x) w
), jb AS (
  INSERT INTO nw_jobs.jobs (project_id, job_id, created_at, kind, idempotency_key, actor_id,
                            attempt, cancel_requested, started_at, finished_at, heartbeat_at,
                            runner_id, doc, au_status, queue_at, limit_key, priority,
                            actor_seq)
  SELECT %(project_id)s, x.job_id, x.created_at, x.kind, x.idempotency_key, x.actor_id,
         x.attempt, false, NULL, NULL, NULL, x.runner_id, %(shared)s::jsonb || x.doc,
         'pending', x.queue_at,
         x.limit_key, x.priority,
         b.seq + row_number() OVER (PARTITION BY b.actor ORDER BY x.n)
    FROM x JOIN base b ON b.actor = coalesce(x.actor_id, '')
   ORDER BY x.job_id
  ON CONFLICT (project_id, job_id) DO NOTHING
  RETURNING job_id, queue_at
), counts AS (
  SELECT count(*) AS inserted, count(queue_at) AS claimable FROM jb
)
SELECT c.inserted,
       (SELECT count(*) FROM (SELECT pg_notify(%(channel)s, '') WHERE c.claimable > 0) n)
         AS notified,
       CASE WHEN c.inserted < (SELECT count(*) FROM x)
            THEN (SELECT array_agg(x.job_id ORDER BY x.job_id) FROM x
                   WHERE x.job_id NOT IN (SELECT job_id FROM jb)) END AS skipped
  FROM counts c;

-- name: start
-- queued -> running for the process holding the callable: bumps the attempt
-- (the lease counter), stamps started_at and a first beat, takes the lease,
-- and appends the attempt to the record's `attempts` (its number in the run,
-- its lease, the runner with the host and pid it announced, when it started;
-- the outcome closes it).
-- No row when the job is no longer queued (cancelled first, or gone), or
-- when it may not start here: its not_before has not come, or its key has a
-- limit (PostgresJobStore.start decides those, under the key's lock).
WITH picked AS (
  SELECT job_id, 0 AS queue_at, false AS held FROM nw_jobs.jobs j
   WHERE project_id = %(project_id)s AND job_id = %(job_id)s AND au_status = 'pending'
     AND NOT cancel_requested
     AND coalesce((doc->>'not_before')::double precision, 0) <= %(now)s
     AND (%(limited_ok)s OR limit_key IS NULL
          OR NOT EXISTS (SELECT 1 FROM nw_jobs.limits l WHERE l.limit_key = j.limit_key))
     FOR UPDATE OF j
), {{start_picked}}
SELECT {{job_columns}}
  FROM jb j JOIN picked USING (job_id)
 ORDER BY picked.queue_at, j.job_id;

-- name: claim
-- The first due claimable jobs of these kinds in claim order (priority, then
-- the actors' turns, then age), up to %(limit)s: SKIP LOCKED over the partial
-- index jobs_claim, so concurrent claims never take the same job and never
-- wait on each other. A job whose key has a limit is not started here: it is
-- returned as `held` (job id and key) for `claim_limited`, which locks the
-- key's limit row first. Keys that are full, out of rate, or in
-- %(skip_keys)s are passed over, so they hold up no other key.
WITH blocked AS MATERIALIZED (
  SELECT l.limit_key FROM nw_jobs.limits l
   WHERE l.limit_key = ANY(%(skip_keys)s::text[])
      OR l.max_running <= {{limit_running}}
      OR l.per_second <= {{limit_recent_starts}}
), {{claim_pick}}
SELECT picked.held, picked.limit_key, picked.job_id, jb.created_at, jb.kind, jb.attempt,
       jb.cancel_requested, jb.started_at, jb.finished_at, jb.heartbeat_at, jb.runner_id,
       jb.doc, jb.au_status AS status, jb.au_value AS value,
       jb.au_error AS error
  FROM picked LEFT JOIN jb USING (job_id)
 WHERE picked.held OR jb.job_id IS NOT NULL
 ORDER BY picked.n;

-- name: lock_limits
-- The limit rows of these keys, locked in key order (so two claims never wait
-- on each other in a cycle): every claim or start of a limited key holds its
-- row until it commits, so the count that follows (a new statement, a new
-- snapshot) sees every start committed before.
SELECT limit_key FROM nw_jobs.limits
 WHERE limit_key = ANY(%(keys)s::text[])
 ORDER BY limit_key
   FOR UPDATE;

-- name: limit_rooms
-- How many more jobs of each locked key may start now: the free slots under
-- max_running (running: started and not finished, database-wide) and the
-- starts left in the last second under per_second; NULL: no cap of that sort.
SELECT l.limit_key,
       l.max_running - {{limit_running}} AS running_room,
       l.per_second - {{limit_recent_starts}} AS rate_room,
       (SELECT min(t) FROM unnest(l.starts) t WHERE t > %(now)s - 1.0) AS oldest_start
  FROM nw_jobs.limits l
 WHERE l.limit_key = ANY(%(keys)s::text[]);

-- name: start_ids
-- These held jobs moved to running as by `claim` (each still queued, due and
-- not cancelled: it was unlocked between the two statements).
WITH picked AS (
  SELECT job_id, u.n, false AS held FROM nw_jobs.jobs j
    JOIN unnest(%(job_ids)s::text[]) WITH ORDINALITY AS u(id, n) ON u.id = j.job_id
   WHERE j.project_id = %(project_id)s AND j.queue_at IS NOT NULL AND j.queue_at <= %(now)s
     AND j.au_status = 'pending' AND NOT j.cancel_requested
     FOR UPDATE OF j SKIP LOCKED
), {{start_picked}}
SELECT {{job_columns}}, j.limit_key
  FROM jb j JOIN picked USING (job_id)
 ORDER BY picked.n;

-- name: note_starts
-- The sliding-window log of the keys that have a per_second: this claim's
-- starts appended (one %(now)s per job, %(counts)s by key), starts older than
-- a second dropped.
UPDATE nw_jobs.limits l
   SET starts = ARRAY(SELECT t FROM unnest(l.starts) t WHERE t > %(now)s - 1.0)
                || array_fill(%(now)s::double precision, ARRAY[u.n]),
       updated_at = %(now)s
  FROM unnest(%(keys)s::text[], %(counts)s::integer[]) AS u(k, n)
 WHERE l.limit_key = u.k AND l.per_second IS NOT NULL;

-- name: job_limit
-- Why `start` did not start a job: is it still startable, its key and
-- whether that has a limit row, its not_before.
SELECT j.limit_key, j.au_status = 'pending' AND NOT j.cancel_requested AS startable,
       EXISTS (SELECT 1 FROM nw_jobs.limits l WHERE l.limit_key = j.limit_key) AS limited,
       j.doc->'not_before' AS not_before
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s;

-- name: set_limit
-- Create or change a key's limit (database-wide); the rate log is kept.
INSERT INTO nw_jobs.limits (limit_key, max_running, per_second, updated_at)
VALUES (%(key)s, %(max_running)s, %(per_second)s, %(now)s)
ON CONFLICT (limit_key) DO UPDATE
   SET max_running = excluded.max_running, per_second = excluded.per_second,
       updated_at = excluded.updated_at;

-- name: delete_limit
DELETE FROM nw_jobs.limits WHERE limit_key = %(key)s;

-- name: limits
-- Every limit with its running count (database-wide), by key.
SELECT l.limit_key, l.max_running, l.per_second,
       {{limit_running}} AS running,
       {{limit_recent_starts}} AS started_last_s
  FROM nw_jobs.limits l
 ORDER BY l.limit_key;

-- name: queue_ahead
-- The project's claimable jobs in claim order with what the ETA of a queued
-- job needs: key, due time, predicted run time (up to %(limit)s rows).
SELECT job_id, limit_key, queue_at, priority,
       doc->'eta_p50' AS eta_p50, doc->>'eta_confidence' AS eta_confidence
  FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s AND queue_at IS NOT NULL AND NOT cancel_requested
 ORDER BY priority DESC, actor_seq, created_at, job_id
 LIMIT %(limit)s;

-- name: patch
-- Fenced update of record fields. %(cols)s is a JSON object of the column
-- fields to set (a key that is absent leaves its column unchanged; one
-- present with null clears it); %(doc)s is merged into `doc` at the top
-- level. One statement text whatever the fields, so it is prepared once.
-- A null %(attempt)s means unfenced.
WITH p AS (SELECT %(cols)s::jsonb AS c, %(doc)s::jsonb AS d)
UPDATE nw_jobs.jobs j
   SET {{patch_columns}},
       doc = j.doc || p.d
  FROM p
 WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s
   AND j.attempt = coalesce(%(attempt)s::integer, j.attempt);

-- name: finish_many
-- Terminal writes, many in one statement (the group commit of `finish`; the
-- batch as `finish_batch` reads it). Returns the ids written, and NOTIFYs the
-- project's change channel once when any was (a `jobs.wait` wakes on it).
WITH {{finish_batch}}
-- one NOTIFY for the batch, on the project's change channel (`jobs.wait`)
SELECT job_id, (SELECT pg_notify(%(changes_channel)s, '')) IS NULL AS notified FROM fj;

-- name: finish_many_and_claim
-- A worker's batch of finishes (as `finish_many`) and the claim (as `claim`:
-- the same `blocked` and `picked`, claim order, full keys passed over, the
-- attempt recorded) of the jobs that take their slots, in one statement: one
-- round trip, and the finishes commit with the claims or not at all, so a
-- result is durable before its slot runs anything else. A job whose key has a
-- limit is not started here but returned `held`, for `_claim_limited` once
-- this has committed (it counts the keys again under their locks, and then
-- sees these finishes). `blocked` reads the snapshot from before the finishes,
-- so it leaves the batch's own jobs out of the running counts: it only
-- decides which jobs come back held, never what starts. One row at least:
-- the ids written, then one picked job per row (NULLs when none was picked).
-- The change channel is NOTIFYed once when any finish was written.
WITH {{finish_batch}}, blocked AS MATERIALIZED (
  SELECT l.limit_key FROM nw_jobs.limits l
   WHERE l.max_running <= (SELECT count(*) FROM nw_jobs.jobs r
                            WHERE r.limit_key = l.limit_key AND r.started_at IS NOT NULL
                              AND r.finished_at IS NULL
                              AND NOT (r.project_id = %(project_id)s
                                       AND r.job_id = ANY(%(job_ids)s::text[])))
      OR l.per_second <= {{limit_recent_starts}}
), {{claim_pick}}
SELECT (SELECT coalesce(array_agg(job_id), '{}') FROM fj) AS finished,
       (SELECT pg_notify(%(changes_channel)s, '') FROM (SELECT 1 FROM fj LIMIT 1) x) IS NULL
         AS notified,
       r.*
  FROM (SELECT 1) one
  LEFT JOIN (SELECT picked.n, picked.held, picked.limit_key, picked.job_id, jb.created_at,
                    jb.kind, jb.attempt, jb.cancel_requested, jb.started_at, jb.finished_at,
                    jb.heartbeat_at, jb.runner_id, jb.doc, jb.au_status AS status, jb.au_value AS value,
       jb.au_error AS error
               FROM picked LEFT JOIN jb USING (job_id)
              WHERE picked.held OR jb.job_id IS NOT NULL) r ON true
 ORDER BY r.n;

-- name: requeue
-- A failed attempt goes back to the queue, due at %(not_before)s (fenced;
-- record fields patched as by `patch`); its lease is dropped. A job already
-- finished stays finished (its attempt's result committed first: a stopping
-- worker putting it back must not make it run again).
WITH p AS (SELECT %(cols)s::jsonb AS c, %(doc)s::jsonb AS d),
jb AS (
  UPDATE nw_jobs.jobs j
     SET {{patch_columns}},
         doc = j.doc || p.d,
         au_status = 'pending', au_value = NULL, au_error = NULL, au_completed_at = NULL,
         queue_at = %(not_before)s,
         lease = NULL
    FROM p
   WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s
     AND j.attempt = coalesce(%(attempt)s::integer, j.attempt) AND j.finished_at IS NULL
  RETURNING j.job_id
)
SELECT count(*) AS requeued FROM jb;

-- fragment: cancel_cur
-- A cancel request of the jobs in `cur` (job_id, queued): the flag set, the
-- au status flipped; a queued one finished at once with %(doc)s (why) merged
-- into its record, a running one left to stop (it reads `cancelling`; its
-- ending goes through the outcome rules).
UPDATE nw_jobs.jobs j
   SET cancel_requested = true, au_status = 'cancelled', au_reason = 'cancel requested',
       queue_at = NULL,
       finished_at = CASE WHEN cur.queued THEN %(now)s ELSE j.finished_at END,
       doc = CASE WHEN cur.queued THEN j.doc || %(doc)s::jsonb ELSE j.doc END
  FROM cur
 WHERE j.project_id = %(project_id)s AND j.job_id = cur.job_id

-- name: request_cancel
-- Sets the cancel flag of a queued or running job and flips its au status to
-- cancelled. A queued job is finished at once (it never runs), with %(doc)s
-- (why) merged into its record; a running one reads `cancelling` until its
-- body stops. A finished job is left alone. The change channel is NOTIFYed
-- when the job was flagged.
WITH cur AS (
  SELECT job_id, au_status = 'pending' AS queued FROM nw_jobs.jobs
   WHERE project_id = %(project_id)s AND job_id = %(job_id)s AND NOT cancel_requested
     AND au_status IN ('pending', 'running')
     FOR UPDATE
), jb AS (
  {{cancel_cur}}
  RETURNING j.job_id
)
SELECT count(*) AS cancelled,
       (SELECT pg_notify(%(changes_channel)s, '') FROM (SELECT 1 FROM jb LIMIT 1) x) IS NULL
         AS notified
  FROM jb;

-- name: cancel_steps
-- Every unfinished step of a pipeline (nw/jobs/stores/pipelines_postgres.py),
-- cancelled in one statement as `request_cancel` cancels one. Locked in id
-- order. The settle trigger then runs for each step finished here (at the
-- statement's end, when every step is: only a job outside the pipeline that
-- waits on a step is left to stop or release). Returns the steps flagged;
-- the change channel is NOTIFYed when any step was.
WITH cur AS (
  SELECT j.job_id, j.au_status = 'pending' AS queued
    FROM nw_jobs.pipeline_steps s
    JOIN nw_jobs.jobs j ON j.project_id = s.project_id AND j.job_id = s.job_id
   WHERE s.project_id = %(project_id)s AND s.pipeline_id = %(pipeline_id)s
     AND NOT j.cancel_requested AND j.au_status IN ('pending', 'running')
   ORDER BY j.job_id
     FOR UPDATE OF j
), jb AS (
  {{cancel_cur}}
  RETURNING j.job_id
)
SELECT coalesce(array_agg(job_id), '{}') AS cancelled,
       (SELECT pg_notify(%(changes_channel)s, '') FROM (SELECT 1 FROM jb LIMIT 1) x) IS NULL
         AS notified
  FROM jb;

-- name: beat
-- One heartbeat for a runner and the running jobs it holds; returns the ids
-- among them it should stop (cancel requested, finished, or taken over).
-- A runner's beat never moves back (two of its threads beat: see beat_runner).
WITH rb AS (
  UPDATE nw_jobs.runners SET beat_at = GREATEST(beat_at, %(now)s)
   WHERE project_id = %(project_id)s AND runner_id = %(runner_id)s
), jb AS (
  UPDATE nw_jobs.jobs SET heartbeat_at = %(now)s
   WHERE project_id = %(project_id)s AND job_id = ANY(%(job_ids)s::text[])
     AND finished_at IS NULL AND runner_id = %(runner_id)s
)
SELECT job_id FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s AND job_id = ANY(%(job_ids)s::text[])
   AND (cancel_requested OR finished_at IS NOT NULL OR runner_id IS DISTINCT FROM %(runner_id)s);

-- name: put_record
-- Upsert a whole record (unfenced: the index view's __setitem__). A new job's
-- au status is pending; an existing job keeps its au status.
INSERT INTO nw_jobs.jobs (project_id, job_id, created_at, kind, idempotency_key, actor_id,
                          attempt, cancel_requested, started_at, finished_at, heartbeat_at,
                          runner_id, doc, au_status)
VALUES (%(project_id)s, %(job_id)s, %(created_at)s, %(kind)s, %(idempotency_key)s,
        %(actor_id)s, %(attempt)s, %(cancel_requested)s, %(started_at)s, %(finished_at)s,
        %(heartbeat_at)s, %(runner_id)s, %(doc)s, 'pending')
ON CONFLICT (project_id, job_id) DO UPDATE
   SET created_at = excluded.created_at, kind = excluded.kind,
       idempotency_key = excluded.idempotency_key, actor_id = excluded.actor_id,
       attempt = excluded.attempt, cancel_requested = excluded.cancel_requested,
       started_at = excluded.started_at, finished_at = excluded.finished_at,
       heartbeat_at = excluded.heartbeat_at, runner_id = excluded.runner_id,
       doc = excluded.doc;

-- name: get_status
-- One job's au status entry (the status view's __getitem__): its au columns,
-- created when the job was, at the job's attempt.
SELECT au_status AS status, au_value AS value, au_error AS error,
       au_reason AS terminal_reason, to_timestamp(created_at) AS created_at,
       au_completed_at AS completed_at, attempt
  FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s AND job_id = %(job_id)s;

-- name: put_status
-- Write a job's au status entry (the status view's __setitem__); a job not in
-- the store has none to write (returns no row).
UPDATE nw_jobs.jobs
   SET au_status = %(status)s, au_value = %(value)s::jsonb, au_error = %(error)s::text,
       au_reason = %(terminal_reason)s::text,
       au_completed_at = %(completed_at)s::timestamptz, queue_at = NULL
 WHERE project_id = %(project_id)s AND job_id = %(job_id)s
RETURNING job_id;

-- name: delete
-- Remove one job: its row and its progress trail.
WITH pb AS (
  DELETE FROM nw_jobs.progress WHERE project_id = %(project_id)s AND job_id = %(job_id)s
)
DELETE FROM nw_jobs.jobs WHERE project_id = %(project_id)s AND job_id = %(job_id)s;

-- name: purge
-- Every row of the project (tests, benchmarks, retiring a project); returns
-- the number of jobs.
WITH jb AS (
  DELETE FROM nw_jobs.jobs WHERE project_id = %(project_id)s RETURNING 1
), pb AS (
  DELETE FROM nw_jobs.progress WHERE project_id = %(project_id)s
), db AS (
  DELETE FROM nw_jobs.durations WHERE project_id = %(project_id)s
), rb AS (
  DELETE FROM nw_jobs.runners WHERE project_id = %(project_id)s
), ub AS (
  DELETE FROM nw_jobs.spend_rollup WHERE project_id = %(project_id)s
), kb AS (
  DELETE FROM nw_jobs.parked WHERE project_id = %(project_id)s
), plb AS (
  DELETE FROM nw_jobs.pipelines WHERE project_id = %(project_id)s
), psb AS (
  DELETE FROM nw_jobs.pipeline_steps WHERE project_id = %(project_id)s
), eb AS (
  DELETE FROM nw_jobs.job_edges WHERE project_id = %(project_id)s
), wb AS (
  DELETE FROM nw_jobs.job_waits WHERE project_id = %(project_id)s
)
SELECT count(*) AS jobs FROM jb;

-- fragment: spend_sums
-- A set of jobs' committed spend (`spend`, `spend_by_actor`): a missing or
-- non-false lower-bound flag on a finished job that started makes the total
-- a lower bound ("unreported" is not "exact"); a figure that is not a JSON
-- number counts as absent.
coalesce(sum(
         coalesce(CASE WHEN jsonb_typeof(doc->'prior_actual_usd') = 'number'
                       THEN (doc->>'prior_actual_usd')::double precision END, 0)
       + coalesce(CASE WHEN jsonb_typeof(doc->'earlier_runs_usd') = 'number'
                       THEN (doc->>'earlier_runs_usd')::double precision END, 0)
       + CASE WHEN finished_at IS NULL THEN 0
              ELSE coalesce(CASE WHEN jsonb_typeof(doc->'actual_usd') = 'number'
                                 THEN (doc->>'actual_usd')::double precision END, 0) END
       ), 0.0) AS actual_usd,
       coalesce(bool_or(finished_at IS NOT NULL AND started_at IS NOT NULL
                        AND coalesce(doc->'actual_is_lower_bound'
                                     NOT IN ('false'::jsonb, '0'::jsonb), true)),
                false) AS lower_bound,
       coalesce(sum(CASE WHEN finished_at IS NULL
                         THEN CASE WHEN jsonb_typeof(doc->'estimated_usd') = 'number'
                                   THEN (doc->>'estimated_usd')::double precision END END),
                0.0) AS live_estimated_usd,
       count(*) FILTER (WHERE finished_at IS NULL
                          AND jsonb_typeof(doc->'estimated_usd') IS DISTINCT FROM 'number')
         AS live_unknown

-- name: spend
-- Committed spend in one pass over the project's rows. Mirrors the embedded
-- store: a missing or non-false lower-bound flag on a finished job that
-- started makes the total a lower bound ("unreported" is not "exact"); a
-- figure that is not a JSON number counts as absent.
SELECT {{spend_sums}}
  FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s;

-- name: spend_by_actor
-- One actor's spend over a rolling window: the `spend` of the jobs created at
-- or after %(since)s by this actor (index jobs_actor).
SELECT {{spend_sums}}
  FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s AND actor_id = %(actor_id)s AND created_at >= %(since)s;

-- name: samples
-- The newest %(window)s duration samples of each key, newest first.
SELECT k.key,
       ARRAY(SELECT d.seconds FROM nw_jobs.durations d
              WHERE d.project_id = %(project_id)s AND d.key = k.key
              ORDER BY d.at DESC, d.id DESC
              LIMIT %(window)s) AS seconds
  FROM unnest(%(keys)s::text[]) AS k(key);

-- name: add_samples
-- One sample per key, and each key pruned to its newest %(window)s (the
-- insert is not visible to the delete: it keeps %(window)s - 1 old ones).
WITH ins AS (
  INSERT INTO nw_jobs.durations (project_id, key, at, seconds)
  SELECT %(project_id)s, k, %(now)s, s
    FROM unnest(%(keys)s::text[], %(seconds)s::float8[]) AS u(k, s)
)
DELETE FROM nw_jobs.durations d USING unnest(%(keys)s::text[]) AS k(key)
 WHERE d.project_id = %(project_id)s AND d.key = k.key
   AND d.id NOT IN (SELECT id FROM nw_jobs.durations
                     WHERE project_id = %(project_id)s AND key = k.key
                     ORDER BY at DESC, id DESC
                     LIMIT greatest(%(window)s - 1, 0));

-- name: add_samples_retry
-- The retried form of `add_samples` (the first try may have committed before
-- its reply was lost): a sample already there is not written twice. Only a
-- retry pays for the check; `prune_samples` follows in the same transaction.
INSERT INTO nw_jobs.durations (project_id, key, at, seconds)
SELECT %(project_id)s, k, %(now)s, s
  FROM unnest(%(keys)s::text[], %(seconds)s::float8[]) AS u(k, s)
 WHERE NOT EXISTS (SELECT 1 FROM nw_jobs.durations d
                    WHERE d.project_id = %(project_id)s AND d.key = u.k
                      AND d.at = %(now)s AND d.seconds = u.s);

-- name: prune_samples
-- Each key down to its newest %(window)s samples.
DELETE FROM nw_jobs.durations d USING unnest(%(keys)s::text[]) AS k(key)
 WHERE d.project_id = %(project_id)s AND d.key = k.key
   AND d.id NOT IN (SELECT id FROM nw_jobs.durations
                     WHERE project_id = %(project_id)s AND key = k.key
                     ORDER BY at DESC, id DESC
                     LIMIT %(window)s);

-- name: append_progress
-- One progress beat on the job's trail, fenced by the attempt (no row is
-- written when the attempt is no longer current).
INSERT INTO nw_jobs.progress (project_id, job_id, attempt, ts, pct, message, stage)
SELECT %(project_id)s, %(job_id)s, %(attempt)s::integer, %(ts)s::double precision,
       %(pct)s::double precision, %(message)s::text, %(stage)s::jsonb
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s
   AND j.attempt = coalesce(%(attempt)s::integer, j.attempt);

-- name: append_progress_retry
-- The retried form of `append_progress`: a beat already on the trail is not
-- appended twice. Returns 1 when the beat is there (found or written).
WITH dup AS (
  SELECT 1 FROM nw_jobs.progress
   WHERE project_id = %(project_id)s AND job_id = %(job_id)s
     AND attempt IS NOT DISTINCT FROM %(attempt)s::integer AND ts = %(ts)s::double precision
     AND pct IS NOT DISTINCT FROM %(pct)s::double precision
     AND message IS NOT DISTINCT FROM %(message)s::text
   LIMIT 1
), ins AS (
  INSERT INTO nw_jobs.progress (project_id, job_id, attempt, ts, pct, message, stage)
  SELECT %(project_id)s, %(job_id)s, %(attempt)s::integer, %(ts)s::double precision,
         %(pct)s::double precision, %(message)s::text, %(stage)s::jsonb
    FROM nw_jobs.jobs j
   WHERE j.project_id = %(project_id)s AND j.job_id = %(job_id)s
     AND j.attempt = coalesce(%(attempt)s::integer, j.attempt)
     AND NOT EXISTS (SELECT 1 FROM dup)
  RETURNING 1
)
SELECT (SELECT count(*) FROM dup) + (SELECT count(*) FROM ins) AS appended;

-- name: progress
-- The newest %(limit)s beats of a job's trail, newest first.
SELECT ts, pct, message, stage, attempt FROM nw_jobs.progress
 WHERE project_id = %(project_id)s AND job_id = %(job_id)s
 ORDER BY seq DESC
 LIMIT %(limit)s;

-- name: register_runner
-- Announce a process that runs bodies (role, host, pid, wake address).
INSERT INTO nw_jobs.runners (project_id, runner_id, info, started_at, beat_at)
VALUES (%(project_id)s, %(runner_id)s, %(info)s, %(now)s, %(now)s)
ON CONFLICT (project_id, runner_id) DO UPDATE
   SET info = excluded.info, started_at = excluded.started_at, beat_at = excluded.beat_at;

-- name: unregister_runner
DELETE FROM nw_jobs.runners WHERE project_id = %(project_id)s AND runner_id = %(runner_id)s;

-- name: runners
-- Every announced runner of the project with its last beat.
SELECT runner_id, info, started_at, beat_at FROM nw_jobs.runners
 WHERE project_id = %(project_id)s
 ORDER BY started_at, runner_id;

-- name: beat_runner
-- A runner's own beat and every runner of the project, in one round trip (a
-- worker's reaper judges what its beat read). The SELECT sees the runners as
-- they were before this statement's update: the caller stamps its own row.
-- The beat never moves back: a claim that carries it (claim_and_beat) may
-- commit after a later beat of the beat thread, its time read before.
WITH rb AS (
  UPDATE nw_jobs.runners SET beat_at = GREATEST(beat_at, %(now)s)
   WHERE project_id = %(project_id)s AND runner_id = %(runner_id)s
)
SELECT runner_id, info, started_at, beat_at FROM nw_jobs.runners
 WHERE project_id = %(project_id)s
 ORDER BY started_at, runner_id;

-- name: notify
-- Wake the project's idle workers (they LISTEN on %(channel)s).
SELECT pg_notify(%(channel)s, '');

-- name: finished_before
-- The oldest finished jobs that finished before %(cutoff)s (index
-- jobs_finished), locked: what `prune` rolls up and deletes, a batch at a time.
SELECT {{job_columns}}
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.finished_at IS NOT NULL
   AND j.finished_at < %(cutoff)s::double precision
 ORDER BY j.finished_at, j.job_id
 LIMIT %(limit)s
   FOR UPDATE OF j SKIP LOCKED;

-- name: prune_rows
-- Fold pruned jobs into their days' rollup rows (%(rollup)s: a JSON array of
-- {day, kind, actor_id, status, grade, jobs, usd, lower_bound}) and delete the
-- jobs %(job_ids)s: record and progress trail. Returns the jobs deleted.
WITH up AS (
  INSERT INTO nw_jobs.spend_rollup (project_id, day, kind, actor_id, status, grade, jobs, usd,
                                    lower_bound)
  SELECT %(project_id)s, x.day, x.kind, x.actor_id, x.status, x.grade, x.jobs, x.usd,
         x.lower_bound
    FROM jsonb_to_recordset(%(rollup)s::jsonb)
      AS x(day date, kind text, actor_id text, status text, grade text, jobs bigint,
           usd double precision, lower_bound boolean)
  ON CONFLICT (project_id, day, kind, actor_id, status, grade) DO UPDATE
     SET jobs = spend_rollup.jobs + excluded.jobs, usd = spend_rollup.usd + excluded.usd,
         lower_bound = spend_rollup.lower_bound OR excluded.lower_bound
), pb AS (
  DELETE FROM nw_jobs.progress
   WHERE project_id = %(project_id)s AND job_id = ANY(%(job_ids)s::text[])
), jb AS (
  DELETE FROM nw_jobs.jobs
   WHERE project_id = %(project_id)s AND job_id = ANY(%(job_ids)s::text[])
  RETURNING 1
)
SELECT count(*) AS deleted FROM jb;

-- name: rollup_spend
-- What pruned jobs spent (added to `spend`: a budget counts it).
SELECT coalesce(sum(usd), 0.0) AS usd, coalesce(bool_or(lower_bound), false) AS lower_bound
  FROM nw_jobs.spend_rollup
 WHERE project_id = %(project_id)s;

-- name: rollup_spend_by_actor
-- What one actor's pruned jobs spent since the day of %(since)s (the rollup is
-- by day: a pruned job counts for its whole finishing day).
SELECT coalesce(sum(usd), 0.0) AS usd, coalesce(bool_or(lower_bound), false) AS lower_bound
  FROM nw_jobs.spend_rollup
 WHERE project_id = %(project_id)s AND actor_id = %(actor_id)s AND day >= %(since_day)s::date;

-- name: spend_since
-- Spend of the jobs finished since %(since)s (index jobs_finished) by kind and
-- actor, split at %(today)s (a run's spend counts on the day it finished,
-- earlier attempts and runs included), then the rollup's share (days, UTC).
SELECT j.kind, coalesce(j.actor_id, '') AS actor_id,
       j.finished_at >= %(today)s::double precision AS today,
       sum(coalesce(CASE WHEN jsonb_typeof(j.doc->'prior_actual_usd') = 'number'
                         THEN (j.doc->>'prior_actual_usd')::double precision END, 0)
         + coalesce(CASE WHEN jsonb_typeof(j.doc->'earlier_runs_usd') = 'number'
                         THEN (j.doc->>'earlier_runs_usd')::double precision END, 0)
         + coalesce(CASE WHEN jsonb_typeof(j.doc->'actual_usd') = 'number'
                         THEN (j.doc->>'actual_usd')::double precision END, 0)) AS usd,
       coalesce(bool_or(j.started_at IS NOT NULL
                        AND coalesce(j.doc->'actual_is_lower_bound'
                                     NOT IN ('false'::jsonb, '0'::jsonb), true)),
                false) AS lower_bound
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s AND j.finished_at IS NOT NULL
   AND j.finished_at >= %(since)s::double precision
 GROUP BY 1, 2, 3
UNION ALL
SELECT kind, actor_id, day >= %(today_day)s::date, sum(usd), bool_or(lower_bound)
  FROM nw_jobs.spend_rollup
 WHERE project_id = %(project_id)s AND day >= %(since_day)s::date
 GROUP BY 1, 2, 3;

-- name: counts
-- How many jobs by status and grade (the grade CASE of `page`), pruned ones included.
SELECT j.state AS state,
       nw_jobs.grade(j.state, j.doc, j.au_error, j.au_value) AS grade,
       count(*) AS n
  FROM nw_jobs.jobs j
 WHERE j.project_id = %(project_id)s
 GROUP BY 1, 2
UNION ALL
SELECT status, nullif(grade, ''), sum(jobs)
  FROM nw_jobs.spend_rollup
 WHERE project_id = %(project_id)s
 GROUP BY 1, 2;

-- name: durations
-- Finished jobs that ran, by kind: how many, their seconds in all, and how
-- many took at most each of the ten bounds %(b0)s .. %(b9)s (cumulative
-- histogram buckets; one pass, a column per bound).
SELECT kind, count(*) AS n, sum(finished_at - started_at) AS seconds,
       count(*) FILTER (WHERE finished_at - started_at <= %(b0)s::double precision) AS b0,
       count(*) FILTER (WHERE finished_at - started_at <= %(b1)s::double precision) AS b1,
       count(*) FILTER (WHERE finished_at - started_at <= %(b2)s::double precision) AS b2,
       count(*) FILTER (WHERE finished_at - started_at <= %(b3)s::double precision) AS b3,
       count(*) FILTER (WHERE finished_at - started_at <= %(b4)s::double precision) AS b4,
       count(*) FILTER (WHERE finished_at - started_at <= %(b5)s::double precision) AS b5,
       count(*) FILTER (WHERE finished_at - started_at <= %(b6)s::double precision) AS b6,
       count(*) FILTER (WHERE finished_at - started_at <= %(b7)s::double precision) AS b7,
       count(*) FILTER (WHERE finished_at - started_at <= %(b8)s::double precision) AS b8,
       count(*) FILTER (WHERE finished_at - started_at <= %(b9)s::double precision) AS b9
  FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s AND finished_at IS NOT NULL AND started_at IS NOT NULL
 GROUP BY kind;

-- name: budgets
-- Every budget (database-wide, like limits), by key.
SELECT budget_key, usd, per, actor_id, kind, updated_at
  FROM nw_jobs.budgets ORDER BY budget_key;

-- name: set_budget
INSERT INTO nw_jobs.budgets (budget_key, usd, per, actor_id, kind, updated_at)
VALUES (%(key)s, %(usd)s, %(per)s, %(actor_id)s, %(kind)s, %(now)s)
ON CONFLICT (budget_key) DO UPDATE
   SET usd = excluded.usd, updated_at = excluded.updated_at;

-- name: delete_budget
DELETE FROM nw_jobs.budgets WHERE budget_key = %(key)s;

-- name: lock_budgets
-- The rows of the budgets an admitted create is checked against, locked in
-- key order (two creates under one budget serialise, whatever their project;
-- never in a cycle). Taken after the project's create lock, before the spend
-- is read (each statement of the transaction reads what committed before it).
SELECT budget_key FROM nw_jobs.budgets
 WHERE budget_key = ANY(%(keys)s::text[])
 ORDER BY budget_key
   FOR UPDATE;

-- name: approval
-- The approval policy (database-wide; no row: the caller's config decides).
SELECT threshold_usd, mode, updated_at FROM nw_jobs.approval WHERE one = 1;

-- name: set_approval
INSERT INTO nw_jobs.approval (one, threshold_usd, mode, updated_at)
VALUES (1, %(threshold_usd)s, %(mode)s, %(now)s)
ON CONFLICT (one) DO UPDATE
   SET threshold_usd = excluded.threshold_usd, mode = excluded.mode,
       updated_at = excluded.updated_at;

-- name: budget_spend
-- A budget's committed spend, database-wide: as `spend`, over the jobs of
-- every project of %(actor_id)s and %(kind)s when given (NULL: every one),
-- finished at or after %(since)s (NULL: all time) or still live (a live
-- job's estimate is spent now). Index jobs_spend_window.
SELECT {{spend_sums}}
  FROM nw_jobs.jobs
 WHERE (%(since)s::double precision IS NULL OR finished_at IS NULL
        OR finished_at >= %(since)s::double precision)
   AND (%(actor_id)s::text IS NULL OR actor_id = %(actor_id)s::text)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text);

-- name: budget_rollup_spend
-- What the pruned jobs a budget counts spent (every project), from the UTC
-- day %(since_day)s on (NULL: all time).
SELECT coalesce(sum(usd), 0.0) AS usd, coalesce(bool_or(lower_bound), false) AS lower_bound
  FROM nw_jobs.spend_rollup
 WHERE (%(since_day)s::date IS NULL OR day >= %(since_day)s::date)
   AND (%(actor_id)s::text IS NULL OR actor_id = %(actor_id)s::text)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text);

-- name: quoted_and_billed
-- The project's newest %(limit)s finished runs that were quoted and billed (a
-- number in both), for the quote-against-bill accuracy (nw/jobs/accuracy.py).
SELECT kind, finished_at,
       (doc->>'estimated_usd')::double precision AS quoted_usd,
       coalesce(CASE WHEN jsonb_typeof(doc->'prior_actual_usd') = 'number'
                     THEN (doc->>'prior_actual_usd')::double precision END, 0)
         + (doc->>'actual_usd')::double precision AS billed_usd,
       doc->'params'->>'model' AS model,
       doc->'params'->'plan'->'calls' AS calls
  FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s AND finished_at IS NOT NULL
   AND finished_at >= %(since)s::double precision
   AND jsonb_typeof(doc->'estimated_usd') = 'number'
   AND jsonb_typeof(doc->'actual_usd') = 'number'
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
 ORDER BY finished_at DESC
 LIMIT %(limit)s;

-- name: policy
-- The whole spend policy in one round trip (every enqueue reads it): a row
-- per budget, then the approval row if there is one.
SELECT 'budget' AS what, budget_key, usd, per, actor_id, kind,
       NULL::double precision AS threshold_usd, NULL::text AS mode
  FROM nw_jobs.budgets
UNION ALL
SELECT 'approval', NULL, NULL, NULL, NULL, NULL, threshold_usd, mode
  FROM nw_jobs.approval WHERE one = 1;

-- name: count_finished_before
-- How many jobs `prune` would delete with this %(cutoff)s (a dry run).
SELECT count(*) AS n FROM nw_jobs.jobs
 WHERE project_id = %(project_id)s AND finished_at IS NOT NULL
   AND finished_at < %(cutoff)s::double precision;
