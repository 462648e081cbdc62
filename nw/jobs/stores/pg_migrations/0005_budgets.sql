-- nw.jobs PostgreSQL store, migration 0005: spend policy (budgets, approval).
--
-- budgets: one row per budget, database-wide like `limits` (every project and
--   host sharing the database shares the provider account, so a cap counts
--   the spend of every project in it). `budget_key` names the budget (its
--   scope and window, see nw/jobs/budgets.py); `per` is 'day', 'week',
--   'month' (calendar windows in UTC) or NULL (all time); `actor_id` and
--   `kind` narrow it (NULL: every actor, every kind). An admitted create locks
--   the rows of the budgets that apply (FOR UPDATE, in key order) before it
--   reads the spend, so two creates under one budget serialise, whatever
--   their projects.
-- approval: at most one row: the approval threshold and whether an enqueue
--   that needs approval is refused without it ('required') or only told so
--   ('advisory').
-- jobs_spend_window: the jobs a calendar window counts (finished since its
--   start, or live), database-wide.
-- Written to apply on any schema from 0001 on (IF NOT EXISTS throughout).
CREATE TABLE IF NOT EXISTS nw_jobs.budgets (
    budget_key text PRIMARY KEY,
    usd        double precision NOT NULL CHECK (usd >= 0),
    per        text CHECK (per IN ('day', 'week', 'month')),
    actor_id   text,
    kind       text,
    updated_at double precision NOT NULL
);

CREATE TABLE IF NOT EXISTS nw_jobs.approval (
    one           integer PRIMARY KEY CHECK (one = 1),
    threshold_usd double precision CHECK (threshold_usd >= 0),
    mode          text NOT NULL CHECK (mode IN ('advisory', 'required')),
    updated_at    double precision NOT NULL
);

CREATE INDEX IF NOT EXISTS jobs_spend_window ON nw_jobs.jobs (finished_at);
