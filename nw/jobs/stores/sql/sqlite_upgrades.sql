-- The embedded store's schema upgrades, by version: the statements that turn
-- a file of the previous version into this one before sqlite_schema.sql
-- creates what is missing. Run by SqliteJobStore when it opens an older file
-- (they compile only against that older schema).

-- name: upgrade_2_limit_key
-- Schema 1 -> 2: the columns of limits, priorities and fair share.
ALTER TABLE jobs ADD COLUMN limit_key TEXT;

-- name: upgrade_2_priority
ALTER TABLE jobs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;

-- name: upgrade_2_actor_seq
ALTER TABLE jobs ADD COLUMN actor_seq INTEGER NOT NULL DEFAULT 0;
