-- Revision 0012_tiers: misfire tiers (runner/tiers.py). A job's tiers live in its definition
-- row (runner.jobs.options -> 'misfire_tiers', no column); this revision adds the record of
-- which tier decided each missed slot, the function that makes a backfill tier's plan
-- (sql/functions/tier_backfill_v1.sql, applied from its frozen copy right after this file)
-- and the misfire_tier alert (runner.alerts, likewise).

-- One row per run a misfire tier decided (the misfire duty, runner/misfire.py, in the
-- transaction that wrote the run; runner.tier_backfill_v1 for a plan's runs): the tier, its
-- action (approve also when a job with side effects had effects of unknown delivery), the
-- range's lateness that picked the tier (how late its oldest missed slot was), the slot's own
-- lateness, whether the owner is alerted, the reason, and the plan a backfill tier made. Kept
-- as long as its run (deleted with it by retention); the run's status_reason may change later
-- (an approval, a backfill), this row does not.
CREATE TABLE runner.misfire_decisions (
    run_id          bigint PRIMARY KEY REFERENCES runner.job_runs (id) ON DELETE CASCADE,
    job_name        text NOT NULL,
    schedule_slot   timestamptz NOT NULL,
    partition_key   text NOT NULL,
    tier            text NOT NULL CHECK (btrim(tier) <> ''),
    action          text NOT NULL CHECK (action IN ('skip', 'catch_up', 'coalesce', 'backfill', 'approve')),
    lateness        interval NOT NULL,
    slot_lateness   interval NOT NULL,
    alert           boolean NOT NULL DEFAULT false,
    reason          text NOT NULL CHECK (btrim(reason) <> ''),
    backfill_id     bigint REFERENCES runner.backfills (id) ON DELETE SET NULL,
    decided_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX misfire_decisions_job ON runner.misfire_decisions (job_name, schedule_slot);
CREATE INDEX misfire_decisions_alert ON runner.misfire_decisions (job_name) WHERE alert;
CREATE INDEX misfire_decisions_backfill ON runner.misfire_decisions (backfill_id)
    WHERE backfill_id IS NOT NULL;

-- the alerts view reads the new table: replaced right after this file (DROP first: the
-- frozen copy adds a branch)
DROP VIEW runner.alerts;
