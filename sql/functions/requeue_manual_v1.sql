-- runner.requeue_manual_v1: the one requeue of an operator's rerun, shared by runner.rerun_v2
-- (one run) and runner.rerun_runs_v1 (a list): the runs become pending, trigger manual, in the
-- correction lane (revision 0011_lanes), due at the clock (as_of), their earlier attempts no
-- longer counted (uncounted_attempts = attempt: a full budget), their counts reset, and the
-- status reason naming the request. keep_checkpoint false clears each run's checkpoint state
-- (its count stays: the next attempt's ctx.resume is None, issue 33); true leaves it, and the
-- next attempt continues from it. The callers lock the runs, check them and write the request
-- row first; this changes the runs and returns them as they are now.
--
-- Not SECURITY DEFINER: it runs as its callers, which run as the schema owner. A runner role
-- may call it (sql/roles.sql grants every such function), but with its own privileges: none
-- holds UPDATE of a run's status, so it changes nothing for them.
CREATE OR REPLACE FUNCTION runner.requeue_manual_v1(
    run_ids bigint[], req bigint, reason text, as_of timestamptz, keep_checkpoint boolean)
RETURNS TABLE (request_id bigint, id bigint, status text, trigger text, attempt integer,
               fence bigint, uncounted_attempts integer, next_attempt_at timestamptz)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
UPDATE runner.job_runs j
SET status = 'pending',
    trigger = 'manual',
    lane = 'correction',
    next_attempt_at = requeue_manual_v1.as_of,
    uncounted_attempts = j.attempt,
    finished_at = NULL,
    processed_count = 0,
    failed_count = 0,
    status_reason = left(format('manual rerun (request %s): %s', requeue_manual_v1.req,
                                btrim(requeue_manual_v1.reason)), 1000),
    checkpoint = CASE WHEN requeue_manual_v1.keep_checkpoint THEN j.checkpoint END,
    checkpoint_at = CASE WHEN requeue_manual_v1.keep_checkpoint THEN j.checkpoint_at END,
    checkpoint_fence = CASE WHEN requeue_manual_v1.keep_checkpoint THEN j.checkpoint_fence END,
    checkpoint_bytes = CASE WHEN requeue_manual_v1.keep_checkpoint THEN j.checkpoint_bytes END,
    checkpoint_summary = CASE WHEN requeue_manual_v1.keep_checkpoint THEN j.checkpoint_summary END,
    updated_at = requeue_manual_v1.as_of
WHERE j.id = ANY (requeue_manual_v1.run_ids)
RETURNING requeue_manual_v1.req, j.id, j.status, j.trigger, j.attempt, j.fence, j.uncounted_attempts,
          j.next_attempt_at
$$;
REVOKE ALL ON FUNCTION runner.requeue_manual_v1(bigint[], bigint, text, timestamptz, boolean) FROM PUBLIC;
