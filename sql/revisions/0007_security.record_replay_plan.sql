-- Frozen copy: runner.record_replay_plan_v1 as revision 0007_security shipped it (lane tag
-- catch_up); 0018_recovery replaces it from sql/functions/record_replay_plan_v1.sql and its
-- downgrade restores this.
-- runner.record_replay_plan_v1: the plan a runner writes for the runs it replays after a
-- misfire (misfire="replay" on a job with verify=, runner/misfire.py), so that they are
-- verified together when done. The worker role has no INSERT on runner.backfills (revision
-- 0007_security: plans were created behind the audit): this function is the only way a
-- runner makes one, and it can make only this kind: lane catch_up, concurrency 1, no rate,
-- no failure threshold, no pause condition, running, requested by the runner. No
-- runner.requests row: it is not an operator's action (the plan's requested_by and reason
-- say why it exists). SECURITY DEFINER with a fixed search_path; EXECUTE for the worker
-- role only. Returns the plan's replay_group_id.
CREATE OR REPLACE FUNCTION runner.record_replay_plan_v1(
    job_name text, range_from timestamptz, range_to timestamptz, expected_runs integer,
    reason text, as_of timestamptz DEFAULT NULL)
RETURNS uuid
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
INSERT INTO runner.backfills (
    job_name, range_from, range_to, partitions, lane, concurrency, rate, max_failures,
    pause_when, force, status, expected_runs, tokens, tokens_at, requested_by, reason,
    created_at, updated_at)
VALUES (
    job_name, range_from, range_to, NULL, 'catch_up', 1, NULL, NULL, NULL, false, 'running',
    expected_runs, 1, coalesce(as_of, now()), 'runner (misfire=replay)', reason,
    coalesce(as_of, now()), coalesce(as_of, now()))
RETURNING replay_group_id
$$;
REVOKE ALL ON FUNCTION runner.record_replay_plan_v1(text, timestamptz, timestamptz, integer, text, timestamptz)
FROM PUBLIC;
