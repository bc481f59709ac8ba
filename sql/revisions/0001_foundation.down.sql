DROP TABLE IF EXISTS runner.attempts;
DROP TABLE IF EXISTS runner.instances;
DROP TABLE IF EXISTS runner.job_runs;
DROP TABLE IF EXISTS runner.job_schedules;
DROP TABLE IF EXISTS runner.jobs;
DROP FUNCTION IF EXISTS runner.lock_key_v1(integer, bigint);
