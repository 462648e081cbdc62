-- nw.jobs PostgreSQL store, migration 0006: a job's grade, defined once.
--
-- nw_jobs.grade: the outcome grade of a job row as nw.jobs.core.status.grade
--   gives it (NULL while the job is not finished; the contract suite checks
--   both agree). Every statement that filters or counts by grade calls it;
--   a LANGUAGE sql IMMUTABLE function of one expression is inlined by the
--   planner, so a page or a count costs what the CASE written in place did.
--   A later change of the rule is a migration that replaces it.
CREATE OR REPLACE FUNCTION nw_jobs.grade(state text, doc jsonb, au_error text, au_value jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN state IN ('queued', 'running', 'cancelling') THEN NULL
            WHEN state = 'cancelled' THEN
              (CASE WHEN doc->>'error_kind' = 'cancelled'
                         AND coalesce(nullif(doc->>'error', ''), au_error) LIKE 'worker lost%'
                    THEN 'error' ELSE 'notice' END)
            WHEN state = 'succeeded' THEN
              (CASE WHEN au_value IS NULL
                         OR au_value IN ('null'::jsonb, '[]'::jsonb, '{}'::jsonb, '""'::jsonb)
                    THEN 'warning' ELSE 'ok' END)
            WHEN doc->>'error_kind' = 'refused' THEN 'warning'
            ELSE 'error' END
$$;
