-- runner.rerun_runs_v1: `runner rerun-many` in the database (issue 30, point 6): queues every
-- run of a list, all of one job, for a new attempt (trigger manual, lane correction, due now)
-- and writes ONE runner.requests row (action rerun_many) naming each run with its state before
-- and after, in the caller's transaction; or changes nothing and raises.
--
-- The operator was shown the runs (their ids, statuses and fences: the impact page, or the
-- CLI's listing): under their row locks each must still be so, and be failed or dead, or the
-- whole request is refused ("changed since it was shown"): a run that succeeded, started or
-- was rerun by someone else in between is never queued again on the strength of an older look.
-- As runner.rerun_v1 for one run: the earlier attempts stop counting against max_attempts
-- (uncounted_attempts = attempt), so each gets a full budget; a run of a backfill keeps its
-- replay group. At most 5,000 runs a request (the caller narrows the range beyond). The
-- requeue is runner.requeue_manual_v1's (runner.rerun_v2's too), the request row
-- runner.operator_request_v1's.
--
-- SECURITY DEFINER, fixed search_path, EXECUTE revoked from PUBLIC, granted to the operator
-- role by sql/roles.sql (revision 0007_security: the operator role writes nothing directly).
CREATE OR REPLACE FUNCTION runner.rerun_runs_v1(
    job_name text, run_ids bigint[], seen_statuses text[], seen_fences bigint[], selection jsonb,
    who text, reason text, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (request_id bigint, id bigint, status text, trigger text, attempt integer,
               fence bigint, uncounted_attempts integer, next_attempt_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    n integer := coalesce(cardinality(run_ids), 0);
    bad record;
    req bigint;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    IF n = 0 THEN
        RAISE EXCEPTION 'no run to rerun; nothing written';
    END IF;
    IF n > 5000 THEN
        RAISE EXCEPTION '% runs in one request, more than 5000: narrow the range; nothing written', n;
    END IF;
    IF coalesce(cardinality(seen_statuses), -1) <> n OR coalesce(cardinality(seen_fences), -1) <> n THEN
        RAISE EXCEPTION 'the run, status and fence arrays differ in length; nothing written';
    END IF;
    IF (SELECT count(DISTINCT x) FROM unnest(run_ids) AS t(x)) <> n THEN
        RAISE EXCEPTION 'a run is listed twice; nothing written';
    END IF;

    PERFORM 1 FROM runner.job_runs r WHERE r.id = ANY (run_ids) ORDER BY r.id FOR UPDATE;
    SELECT s.id, r.id AS found, r.job_name AS job, r.status AS now_status, r.fence AS now_fence,
           s.status AS seen_status, s.fence AS seen_fence
    INTO bad
    FROM unnest(run_ids, seen_statuses, seen_fences) AS s(id, status, fence)
    LEFT JOIN runner.job_runs r ON r.id = s.id
    WHERE r.id IS NULL OR r.job_name IS DISTINCT FROM job_name OR r.status IS DISTINCT FROM s.status
       OR r.fence IS DISTINCT FROM s.fence OR r.status NOT IN ('failed', 'dead')
    ORDER BY s.id
    LIMIT 1;
    IF FOUND THEN
        IF bad.found IS NULL THEN
            RAISE EXCEPTION 'run % no longer exists; nothing written', bad.id;
        ELSIF bad.job IS DISTINCT FROM job_name THEN
            RAISE EXCEPTION 'run % is not a run of job %; nothing written', bad.id, job_name;
        ELSIF bad.now_status NOT IN ('failed', 'dead') AND bad.now_status = bad.seen_status THEN
            RAISE EXCEPTION 'run % is %: only failed or dead runs are rerun in bulk; nothing written',
                bad.id, bad.now_status;
        ELSE
            RAISE EXCEPTION 'run % changed since it was shown (now %, fence %); nothing written: look again',
                bad.id, bad.now_status, bad.now_fence;
        END IF;
    END IF;

    req := runner.operator_request_v1('rerun_many', job_name, who, reason, (SELECT jsonb_build_object(
        'selection', coalesce(selection, '{}'::jsonb),
        'runs', coalesce(jsonb_agg(jsonb_build_object(
            'run_id', r.id,
            'slot', r.schedule_slot,
            'partition_key', r.partition_key,
            'before', jsonb_build_object(
                'status', r.status, 'trigger', r.trigger, 'attempt', r.attempt, 'fence', r.fence,
                'uncounted_attempts', r.uncounted_attempts, 'lane', r.lane,
                'processed_count', r.processed_count, 'failed_count', r.failed_count,
                'last_error', r.last_error),
            'after', jsonb_build_object(
                'status', 'pending', 'trigger', 'manual', 'uncounted_attempts', r.attempt))
            ORDER BY r.schedule_slot, r.partition_key), '[]'::jsonb))
        FROM runner.job_runs r WHERE r.id = ANY (run_ids)));

    -- the runs' checkpoints stay (a bulk rerun resumes each from its last checkpoint)
    RETURN QUERY
    SELECT * FROM runner.requeue_manual_v1(run_ids, req, reason, clock, true);
END
$$;
REVOKE ALL ON FUNCTION runner.rerun_runs_v1(text, bigint[], text[], bigint[], jsonb, text, text, timestamptz)
    FROM PUBLIC;
