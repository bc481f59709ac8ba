-- Revision 0011_lanes, downgrade: the lanes go; runs and plans keep their lane tags (the
-- code of 0010_web never reads them), the defaults are the old ones.
DROP FUNCTION IF EXISTS runner.set_lane_v1(text, integer, integer, boolean, double precision, boolean, text, text, text, timestamptz);
DROP FUNCTION IF EXISTS runner.lane_budget_v1(text[], timestamptz);
DROP FUNCTION IF EXISTS runner.lane_spend_v1(text[], integer[], timestamptz);
DROP INDEX IF EXISTS runner.job_runs_lane_running;
DROP INDEX IF EXISTS runner.job_runs_lane_due;
DROP TABLE IF EXISTS runner.lanes;
ALTER TABLE runner.job_runs ALTER COLUMN lane SET DEFAULT 'default';
ALTER TABLE runner.backfills ALTER COLUMN lane SET DEFAULT 'backfill';
UPDATE runner.backfills SET lane = 'backfill' WHERE lane = 'bulk';
