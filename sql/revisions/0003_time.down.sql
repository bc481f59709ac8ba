-- Undo revision 0003_time.

-- == misfire decisions ==
ALTER TABLE runner.job_runs DROP COLUMN IF EXISTS coalesced_into_slot;

-- == gap scan: watermarks and recorded holes ==
DROP VIEW IF EXISTS runner.missing_slots;
DROP FUNCTION IF EXISTS runner.missing_slots_v1(timestamptz, text, timestamptz);
DROP FUNCTION IF EXISTS runner.advance_watermarks_v1(timestamptz);
DROP FUNCTION IF EXISTS runner.schedule_slots_v1(text, text, interval, text, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS runner.cron_slots_v1(text, text, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS runner.every_slots_v1(interval, timestamptz, timestamptz);
DROP FUNCTION IF EXISTS runner.zone_offset_v1(text, timestamptz);
DROP FUNCTION IF EXISTS runner.cron_spec_v1(text);
DROP INDEX IF EXISTS runner.job_runs_unaccounted;
DROP TABLE IF EXISTS runner.gap_holes;
DROP TABLE IF EXISTS runner.gap_watermarks;

-- == backfills ==
DROP INDEX IF EXISTS runner.job_runs_replay_queue;
DROP INDEX IF EXISTS runner.job_runs_replay_group;
DROP TABLE IF EXISTS runner.backfills;
