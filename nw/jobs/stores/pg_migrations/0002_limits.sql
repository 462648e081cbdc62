-- nw.jobs PostgreSQL store, migration 0002: scarce providers.
--
-- jobs.limit_key: the concurrency/rate key a job counts against (computed at
--   enqueue from the kind's `limit_key`); NULL: no key.
-- jobs.priority: higher is claimed first.
-- jobs.actor_seq: fair share. A job's place in its actor's own queue, started
--   at the head of the project's queue (see `create`): ordering a priority by
--   actor_seq rotates claims across actors.
-- The due time of a job (`enqueue(not_before=...)`, a retry's backoff) is
-- the existing `queue_at`: one mechanism for both.
-- Written to apply on any schema from 0001 on (IF [NOT] EXISTS throughout):
-- migrations were numbered per branch, so a database may get 0002 after 0003.
ALTER TABLE nw_jobs.jobs
    ADD COLUMN IF NOT EXISTS limit_key text,
    ADD COLUMN IF NOT EXISTS priority  integer NOT NULL DEFAULT 0,
    ADD COLUMN IF NOT EXISTS actor_seq bigint  NOT NULL DEFAULT 0;

-- claims: the claimable jobs in claim order (priority, then the actors' turns,
-- then age); replaces jobs_queue, which ordered by due time.
DROP INDEX IF EXISTS nw_jobs.jobs_queue;
CREATE INDEX IF NOT EXISTS jobs_claim ON nw_jobs.jobs
    (project_id, priority DESC, actor_seq, created_at, job_id) WHERE queue_at IS NOT NULL;
-- the running jobs of a key, database-wide (a limit is shared by every project)
CREATE INDEX IF NOT EXISTS jobs_limit_running ON nw_jobs.jobs (limit_key)
    WHERE limit_key IS NOT NULL AND started_at IS NOT NULL AND finished_at IS NULL;
-- an actor's unfinished jobs by turn (the next actor_seq of that actor)
CREATE INDEX IF NOT EXISTS jobs_actor_seq ON nw_jobs.jobs (project_id, coalesce(actor_id, ''), actor_seq)
    WHERE finished_at IS NULL;

-- limits: one row per key, database-wide (not per project: every project and
-- host sharing the database shares the provider account). A claim locks the
-- rows of its candidate keys (FOR UPDATE) before it counts and starts, so two
-- claims of one key serialise; the running count is derived from `jobs`
-- (started, not finished), so finishes, requeues and reaps release a slot by
-- the write they already make.
-- `starts`: the start times of the key's last second (the sliding-window log
-- of `per_second`), trimmed at every claim.
CREATE TABLE IF NOT EXISTS nw_jobs.limits (
    limit_key   text PRIMARY KEY,
    max_running integer CHECK (max_running >= 0),
    per_second  integer CHECK (per_second >= 1),
    starts      double precision[] NOT NULL DEFAULT '{}',
    updated_at  double precision NOT NULL
);
