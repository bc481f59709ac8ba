-- Revision 0007_security, part squatters, downgrade. runner.alerts keeps its lock_squatter
-- branch (it reads only pg_locks, pg_stat_activity, runner.instances and runner.job_runs,
-- which earlier revisions have); the function goes.
DROP FUNCTION IF EXISTS runner.runner_sessions_v1();
