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
