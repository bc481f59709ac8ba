-- 0005_plans, down
DROP INDEX IF EXISTS runner.job_runs_coalesced_into;
