-- nw.jobs PostgreSQL store, migration 0007: parked provider jobs.
--
-- parked: one row per job whose body handed its work to a provider and let
--   its slot go (nw/jobs/core/parked.py), or whose webhook arrived before the
--   park was recorded (`request_id` NULL, the payload kept in `webhook`).
--   `attempt`: the attempt that parked (a row of an older attempt is stale);
--   `due_at`: its next look (a poll, or a kept webhook: now); `look_until`: a
--   poller's lease for one look, taken FOR UPDATE SKIP LOCKED, so any live
--   worker of the kind looks at any parked job and a dead worker's jobs are
--   looked at by the next; `polls`: looks so far (the back-off).
-- Written to apply on any schema from 0001 on (IF NOT EXISTS throughout).
CREATE TABLE IF NOT EXISTS nw_jobs.parked (
    project_id  text NOT NULL,
    job_id      text NOT NULL,
    kind        text NOT NULL,
    attempt     integer NOT NULL,
    request_id  text,
    due_at      double precision NOT NULL,
    look_until  double precision NOT NULL DEFAULT 0,
    polls       integer NOT NULL DEFAULT 0,
    deadline_at double precision,
    webhook     jsonb,
    PRIMARY KEY (project_id, job_id)
);

CREATE INDEX IF NOT EXISTS parked_due ON nw_jobs.parked (project_id, due_at);
