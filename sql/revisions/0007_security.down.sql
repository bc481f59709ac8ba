-- Revision 0007_security, downgrade.
DROP FUNCTION IF EXISTS runner.record_replay_plan_v1(text, timestamptz, timestamptz, integer, text, timestamptz);
DROP FUNCTION IF EXISTS runner.record_backfill_verify_v1(bigint, text, jsonb, text, text, timestamptz);
DROP FUNCTION IF EXISTS runner.cancel_backfill_v1(bigint, text, text, timestamptz);
DROP FUNCTION IF EXISTS runner.resume_backfill_v1(bigint, text, text, integer, boolean, timestamptz);
DROP FUNCTION IF EXISTS runner.pause_backfill_v1(bigint, text, text, timestamptz);
DROP FUNCTION IF EXISTS runner.lock_backfill_for_action(bigint, text, text[], text, text);
DROP FUNCTION IF EXISTS runner.create_backfill_v1(
    text, timestamptz, timestamptz, text[], text, integer, double precision, integer, text, boolean,
    timestamptz[], text[], date[], timestamptz[], timestamptz[], text[], text, text, timestamptz);
DROP FUNCTION IF EXISTS runner.decide_runs_v1(text, text, bigint[], jsonb, text, text, timestamptz);
DROP FUNCTION IF EXISTS runner.set_job_paused_v1(text, boolean, text, text);
DROP FUNCTION IF EXISTS runner.rerun_v1(bigint, text, bigint, boolean, text, text, timestamptz);
DROP FUNCTION IF EXISTS runner.finish_attempts_v1(jsonb, timestamptz);
DROP TRIGGER IF EXISTS backfills_lane_transitions_only ON runner.backfills;
DROP FUNCTION IF EXISTS runner.guard_backfill_status_v1();
DROP TRIGGER IF EXISTS jobs_track_from_earlier_only ON runner.jobs;
DROP FUNCTION IF EXISTS runner.guard_track_from_v1();
