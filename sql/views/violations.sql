-- runner.violations: the ledger audit at now() (runner.check_v1, sql/functions/check_v1.sql):
-- one row per invariant violation, with the rows involved. Empty on a correct ledger.
--
--     SELECT invariant, job_name, schedule_slot, partition_key, run_id, detail
--     FROM runner.violations;
--
-- It judges every slot since each job's track_from; on a large, old ledger call
-- runner.check_v1(now(), since => now() - interval '7 days') instead.
CREATE OR REPLACE VIEW runner.violations AS
SELECT * FROM runner.check_v1((SELECT runner.ledger_now_v1()));
