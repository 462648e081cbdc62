-- The embedded store's schema upgrades, by version: the statements that turn
-- a file of an older version into this one before sqlite_schema.sql creates
-- what is missing, in the same transaction (sqlite_base.upgrade, when a
-- writable handle opens an older file; they compile only against that older
-- schema). `add_<version>_<column>`: run, in file order, when `jobs` lacks
-- the column; `upgrade_8_*`: run when the file still has its `status` table.

-- name: add_2_limit_key
-- Schema 1 -> 2: the columns of limits, priorities and fair share.
ALTER TABLE jobs ADD COLUMN limit_key TEXT;

-- name: add_2_priority
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;

-- name: add_2_actor_seq
ALTER TABLE jobs ADD COLUMN actor_seq INTEGER NOT NULL DEFAULT 0;

-- name: add_8_au_status
-- Schema 7 -> 8 (any older file too): one row per job. The `status` table's
-- columns move into `jobs` (named as PostgreSQL's migration 0004 names them);
-- its created_at and attempt were copies of the job's and are not kept.
ALTER TABLE jobs ADD COLUMN au_status TEXT NOT NULL DEFAULT 'pending';

-- name: add_8_au_value
ALTER TABLE jobs ADD COLUMN au_value TEXT;

-- name: add_8_au_error
ALTER TABLE jobs ADD COLUMN au_error TEXT;

-- name: add_8_au_reason
ALTER TABLE jobs ADD COLUMN au_reason TEXT;

-- name: add_8_au_completed_at
ALTER TABLE jobs ADD COLUMN au_completed_at TEXT;

-- name: add_8_queue_at
ALTER TABLE jobs ADD COLUMN queue_at REAL;

-- name: has_status_table
-- A row when the file keeps the status entries apart (before version 8).
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'status';

-- name: upgrade_8_copy
-- Each job's status entry into its row.
UPDATE jobs
   SET au_status = s.status, au_value = s.value, au_error = s.error,
       au_reason = s.terminal_reason, au_completed_at = s.completed_at, queue_at = s.queue_at
  FROM status s
 WHERE s.job_id = jobs.job_id;

-- name: upgrade_8_missing
-- A job whose entry was missing read as failed, with this error: it still does.
UPDATE jobs SET au_status = 'failed', au_error = 'the job''s status entry is missing'
 WHERE NOT EXISTS (SELECT 1 FROM status s WHERE s.job_id = jobs.job_id);

-- name: upgrade_8_drop_status
DROP TABLE status;

-- name: upgrade_8_drop_claim
-- jobs_claim is re-made on `queue_at` by sqlite_schema.sql.
DROP INDEX IF EXISTS jobs_claim;

-- name: read_older
-- A read-only handle on a file older than 8 (it may not upgrade it): `jobs`
-- as version 8 reads it, a temporary view over the two tables (a temporary
-- name is found before the file's own).
CREATE TEMP VIEW jobs AS
SELECT j.*,
       CASE WHEN s.job_id IS NULL THEN 'failed' ELSE s.status END AS au_status,
       s.value AS au_value,
       CASE WHEN s.job_id IS NULL THEN 'the job''s status entry is missing'
            ELSE s.error END AS au_error,
       s.terminal_reason AS au_reason, s.completed_at AS au_completed_at, s.queue_at
  FROM main.jobs j LEFT JOIN main.status s ON s.job_id = j.job_id;
