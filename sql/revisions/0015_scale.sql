-- Revision 0015_scale: autovacuum settings for the two hot tables (README "Operating it",
-- "Vacuum at high churn"; the figures are in scripts/bench/RESULTS.md "A ledger that is old").
--
-- Every run inserts one row into runner.job_runs and one into runner.attempts and updates
-- each once or twice (claimed, finished); none of these updates is HOT (the status column is
-- in the predicates of the partial indexes of running, due and unaccounted runs). With the
-- server's defaults, autovacuum waits for 50 + 20 % of the table in dead versions, and an
-- insert-driven vacuum for 20 % of it in new rows: the older the ledger, the rarer the
-- vacuum (about 200,000 dead versions at 1M runs, 6,000,000 at 30M) and the more dead
-- entries the partial indexes that the takeover, heartbeat and due-run statements read
-- carry between two vacuums. Fixed thresholds make the cadence a function of the churn, not
-- of the ledger's size: a vacuum (and an analyze) every 100,000 changed rows whatever the
-- table holds, so a ledger of a year behaves as one of a day. A vacuum of a table that grew
-- at its end reads only the pages the visibility map marks as changed.
ALTER TABLE runner.job_runs SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 100000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0.0,
    autovacuum_analyze_threshold = 100000
);
ALTER TABLE runner.attempts SET (
    autovacuum_vacuum_scale_factor = 0.0,
    autovacuum_vacuum_threshold = 100000,
    autovacuum_vacuum_insert_scale_factor = 0.0,
    autovacuum_vacuum_insert_threshold = 100000,
    autovacuum_analyze_scale_factor = 0.0,
    autovacuum_analyze_threshold = 100000
);

-- The on-call question "what failed last night?" (README, recipe 1) reads failed attempts
-- by finish time. Without an index it read every attempt of the ledger (a parallel seq scan:
-- 1.6 s on 3M attempts, growing with the ledger's age; 25 ms with it). The index holds only
-- attempts that ended badly (rare), so the hot path hardly pays for it. Built here inside
-- the migration's transaction, which blocks writes to runner.attempts while it builds (a
-- scan of the table): on a large ledger, build it first by hand with CREATE INDEX
-- CONCURRENTLY (README "Upgrading while running"), and this statement has nothing to do.
CREATE INDEX IF NOT EXISTS attempts_failed_finished ON runner.attempts (finished_at DESC)
    WHERE status IN ('failed', 'timed_out', 'dead', 'abandoned');
