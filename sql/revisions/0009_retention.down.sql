-- Revision 0009_retention, downgrade. The views and functions it replaced come back from the
-- frozen copies of revisions 0004, 0006 and 0008 (see migrations/versions/0009_retention.py).

DROP VIEW IF EXISTS runner.alerts;
DROP VIEW IF EXISTS runner.job_health;
DROP FUNCTION IF EXISTS runner.prune_v1(integer, timestamptz, boolean, integer);
DROP FUNCTION IF EXISTS runner.retire_job_v1(text, text, text);
DROP FUNCTION IF EXISTS runner.unretire_job_v1(text, text, text);
DROP FUNCTION IF EXISTS runner.duty_lock_key_v1(text);
DROP FUNCTION IF EXISTS runner.tracked_spans_v1(text);
DROP TABLE IF EXISTS runner.job_retirements;
ALTER TABLE runner.jobs DROP COLUMN IF EXISTS retired_at;
ALTER TABLE runner.gap_watermarks DROP COLUMN IF EXISTS pruned_through;
