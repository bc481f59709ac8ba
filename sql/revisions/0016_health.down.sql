-- Revision 0016_health, downgrade (runner.alerts was restored before this file, as 0012_tiers
-- shipped it; runner.job_health is re-created after it, as 0010_web shipped it: dropped here,
-- a view cannot lose a column in place).
DROP VIEW IF EXISTS runner.job_health;
DROP FUNCTION IF EXISTS runner.job_health_v1(text);
DROP FUNCTION IF EXISTS runner.prune_instances_v1(integer);
ALTER TABLE runner.jobs DROP COLUMN IF EXISTS in_code_at;
