-- nw.jobs PostgreSQL store, migration 0004: one row per job.
--
-- The au status entry (status, value, error, terminal reason, completion
-- time) moves into the job's own row, and the `status` table goes: every
-- transition wrote the `jobs` row and then the `status` row of the same job
-- (two row versions and two primary-key entries per claim, per finish, per
-- create), and every read joined them. `au_status` already mirrored the
-- entry's status; the rest is four columns:
--   au_value:        the attempt's result (au's ComputationResult.value)
--   au_error:        the error text au reads back
--   au_reason:       the terminal reason (a cancel says why)
--   au_completed_at: when the entry was last finished
-- The entry's created_at is the job's `created_at` and its attempt the job's
-- `attempt` (they were written as copies of them).
ALTER TABLE nw_jobs.jobs
    ADD COLUMN IF NOT EXISTS au_value        jsonb,
    ADD COLUMN IF NOT EXISTS au_error        text,
    ADD COLUMN IF NOT EXISTS au_reason       text,
    ADD COLUMN IF NOT EXISTS au_completed_at timestamptz;

DO $$
BEGIN
    IF to_regclass('nw_jobs.status') IS NOT NULL THEN
        UPDATE nw_jobs.jobs j
           SET au_status = s.status, au_value = s.value, au_error = s.error,
               au_reason = s.terminal_reason, au_completed_at = s.completed_at
          FROM nw_jobs.status s
         WHERE s.project_id = j.project_id AND s.job_id = j.job_id;
        -- a job whose entry was missing read as failed, with this error
        UPDATE nw_jobs.jobs j
           SET au_status = 'failed', au_error = 'the job''s status entry is missing'
         WHERE NOT EXISTS (SELECT 1 FROM nw_jobs.status s
                            WHERE s.project_id = j.project_id AND s.job_id = j.job_id);
        DROP TABLE nw_jobs.status;
    END IF;
END $$;
