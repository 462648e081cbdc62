-- nw.jobs PostgreSQL store, migration 0003: the operator's console.
--
-- History pages of one kind walk their own index; finished jobs are found by
-- age (prune, totals; the duration histogram reads only the index);
-- `spend_rollup` keeps what pruned jobs carried, per UTC
-- day (of finished_at), kind, actor ('' for none), status and grade: their
-- spend (and whether it is a lower bound) and how many they were, so budgets,
-- spend and totals do not change when history is pruned.
CREATE INDEX jobs_kind ON nw_jobs.jobs (project_id, kind, created_at DESC, job_id DESC);
CREATE INDEX jobs_finished ON nw_jobs.jobs (project_id, finished_at) INCLUDE (kind, started_at)
    WHERE finished_at IS NOT NULL;

CREATE TABLE nw_jobs.spend_rollup (
    project_id  text             NOT NULL,
    day         date             NOT NULL,
    kind        text             NOT NULL,
    actor_id    text             NOT NULL,
    status      text             NOT NULL,
    grade       text             NOT NULL,
    jobs        bigint           NOT NULL,
    usd         double precision NOT NULL,
    lower_bound boolean          NOT NULL,
    PRIMARY KEY (project_id, day, kind, actor_id, status, grade)
);
ALTER TABLE nw_jobs.spend_rollup ALTER COLUMN project_id SET STATISTICS 0;
