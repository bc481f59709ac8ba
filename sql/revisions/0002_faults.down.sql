-- Undo revision 0002_faults.
DROP FUNCTION IF EXISTS runner.try_terminate_v1(integer);

-- == runs and attempts: hand-over and leases ==
DROP INDEX IF EXISTS runner.attempts_running_heartbeat;
ALTER TABLE runner.attempts DROP COLUMN IF EXISTS owner_backend_pid;
ALTER TABLE runner.job_runs DROP COLUMN IF EXISTS uncounted_attempts;

-- == effects: the effect log ==
DROP VIEW IF EXISTS runner.run_stages;
DROP TABLE IF EXISTS runner.effects;
