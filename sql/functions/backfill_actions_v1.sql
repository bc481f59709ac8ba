-- The operator's actions on a backfill plan, in the database: `runner backfill pause`,
-- `resume`, `cancel` and `verify`. Each locks the plan, checks the transition, changes it
-- and writes its runner.requests row (action backfill_pause, backfill_resume,
-- backfill_cancel, backfill_verify: the plan before and after) in the caller's transaction,
-- or changes nothing and raises. Like every operator action (see runner.rerun_v1): SECURITY
-- DEFINER with a fixed search_path, db_user = session_user, refusals raised as P0001,
-- EXECUTE for the operator role only. Each returns the request's id.

-- The plan, locked, after the common checks; raises when it is missing or not in `allowed`.
-- (Internal: EXECUTE for nobody but the owner; the action functions call it as the owner.)
CREATE OR REPLACE FUNCTION runner.lock_backfill_for_action(
    plan_id bigint, verb text, allowed text[], who text, reason text)
RETURNS runner.backfills
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    plan runner.backfills%ROWTYPE;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    SELECT * INTO plan FROM runner.backfills b WHERE b.id = plan_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no backfill % (see `runner backfill list`)', plan_id;
    END IF;
    IF NOT plan.status = ANY(allowed) THEN
        RAISE EXCEPTION 'backfill % is %: it cannot be %; nothing written', plan_id, plan.status, verb;
    END IF;
    RETURN plan;
END
$$;
REVOKE ALL ON FUNCTION runner.lock_backfill_for_action(bigint, text, text[], text, text) FROM PUBLIC;

-- pause: planned or running -> paused; its queued runs wait, runs in flight finish.
CREATE OR REPLACE FUNCTION runner.pause_backfill_v1(
    plan_id bigint, who text, reason text, as_of timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    plan runner.backfills%ROWTYPE;
    req bigint;
BEGIN
    plan := runner.lock_backfill_for_action(plan_id, 'paused', ARRAY['planned', 'running'], who, reason);
    UPDATE runner.backfills b
    SET status = 'paused', pause_reason = left(format('paused by %s: %s', btrim(who), btrim(reason)), 1000),
        paused_at = clock, updated_at = clock
    WHERE b.id = plan.id;
    req := runner.operator_request_v1('backfill_pause', plan.job_name, who, reason, jsonb_build_object(
        'backfills', jsonb_build_array(jsonb_build_object(
            'id', plan.id, 'before', jsonb_build_object('status', plan.status),
            'after', jsonb_build_object('status', 'paused')))));
    RETURN req;
END
$$;
REVOKE ALL ON FUNCTION runner.pause_backfill_v1(bigint, text, text, timestamptz) FROM PUBLIC;

-- resume: paused -> running, optionally with another failure threshold (set_max_failures;
-- NULL: never pause on failures). The token bucket starts again with one token.
CREATE OR REPLACE FUNCTION runner.resume_backfill_v1(
    plan_id bigint, who text, reason text, max_failures integer DEFAULT NULL,
    set_max_failures boolean DEFAULT false, as_of timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    plan runner.backfills%ROWTYPE;
    after jsonb := jsonb_build_object('status', 'running');
    req bigint;
BEGIN
    plan := runner.lock_backfill_for_action(plan_id, 'resumed', ARRAY['paused'], who, reason);
    IF coalesce(set_max_failures, false) THEN
        IF max_failures < 0 THEN
            RAISE EXCEPTION '--max-failures must be 0 or more';
        END IF;
        after := after || jsonb_build_object('max_failures', max_failures);
    END IF;
    UPDATE runner.backfills b
    SET status = 'running', pause_reason = NULL, paused_at = NULL,
        max_failures = CASE WHEN coalesce(set_max_failures, false) THEN max_failures ELSE b.max_failures END,
        tokens = 1, tokens_at = clock, updated_at = clock
    WHERE b.id = plan.id;
    req := runner.operator_request_v1('backfill_resume', plan.job_name, who, reason, jsonb_build_object(
        'backfills', jsonb_build_array(jsonb_build_object(
            'id', plan.id,
            'before', jsonb_build_object('status', plan.status, 'pause_reason', plan.pause_reason,
                                         'max_failures', plan.max_failures),
            'after', after))));
    RETURN req;
END
$$;
REVOKE ALL ON FUNCTION runner.resume_backfill_v1(bigint, text, text, integer, boolean, timestamptz) FROM PUBLIC;

-- cancel: planned, running or paused -> cancelled; its runs not yet started (pending, or
-- failed and waiting for a retry) become cancelled with the reason; runs in flight finish.
-- A run the plan displaced and never started (queued again from succeeded with --force, or
-- from skipped or coalesced: still pending at the fence it had) is restored as it was
-- before the plan (the `before` the plan's request row keeps: status, trigger, budget,
-- replay group, lane, finished_at, reason, coalesced_into_slot), never made cancelled: a
-- real success, and the slots coalesced into it, stay covered (issue 26, defect 6). Those
-- runs are listed in the request row under runs_restored. A success the plan ran over with
-- an attempt that failed (waiting for a retry) becomes dead, not cancelled (runs_dead): the
-- gap scan lists it, and the slots coalesced into it, until it is rerun.
CREATE OR REPLACE FUNCTION runner.cancel_backfill_v1(
    plan_id bigint, who text, reason text, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (request_id bigint, runs_cancelled integer)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    plan runner.backfills%ROWTYPE;
    cancelled jsonb;
    restored jsonb;
    overrun jsonb;
    req bigint;
BEGIN
    plan := runner.lock_backfill_for_action(plan_id, 'cancelled', ARRAY['planned', 'running', 'paused'],
                                            who, reason);
    UPDATE runner.backfills b
    SET status = 'cancelled', pause_reason = NULL, finished_at = clock, updated_at = clock
    WHERE b.id = plan.id;
    -- what the plan displaced and never started: back as it was
    WITH displaced AS (
        SELECT (x.v ->> 'run_id')::bigint AS id, x.v -> 'before' AS b
        FROM runner.requests q
        CROSS JOIN LATERAL jsonb_array_elements(q.touched -> 'runs_requeued') AS x(v)
        WHERE q.action = 'backfill' AND q.job_name = plan.job_name
          AND (q.touched -> 'backfill' ->> 'id')::bigint = plan.id
          AND (x.v -> 'before' ->> 'status' = 'succeeded'
               OR (x.v -> 'before' ->> 'status' IN ('skipped', 'coalesced')
                   AND x.v -> 'before' ? 'coalesced_into_slot'))
    ), target AS (
        SELECT r.id, d.b
        FROM displaced d
        JOIN runner.job_runs r ON r.id = d.id
        WHERE r.replay_group_id = plan.replay_group_id AND r.status = 'pending'
          AND r.fence = (d.b ->> 'fence')::bigint
        ORDER BY r.id
        FOR UPDATE OF r
    ), changed AS (
        UPDATE runner.job_runs r
        SET status = t.b ->> 'status',
            trigger = t.b ->> 'trigger',
            uncounted_attempts = (t.b ->> 'uncounted_attempts')::integer,
            replay_group_id = CASE WHEN t.b ? 'replay_group_id' THEN (t.b ->> 'replay_group_id')::uuid
                                   ELSE r.replay_group_id END,
            lane = CASE WHEN t.b ? 'lane' THEN t.b ->> 'lane' ELSE r.lane END,
            next_attempt_at = NULL,
            finished_at = coalesce((t.b ->> 'finished_at')::timestamptz,
                                   (SELECT a.finished_at FROM runner.attempts a
                                    WHERE a.run_id = r.id AND a.fence = r.fence), clock),
            status_reason = coalesce(t.b ->> 'status_reason',
                                     left(format('backfill %s cancelled before it ran: restored', plan.id), 1000)),
            coalesced_into_slot = (t.b ->> 'coalesced_into_slot')::timestamptz,
            processed_count = coalesce((t.b ->> 'processed_count')::bigint, r.processed_count),
            failed_count = coalesce((t.b ->> 'failed_count')::bigint, r.failed_count),
            updated_at = clock
        FROM target t
        WHERE r.id = t.id
        RETURNING r.id, r.status
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'run_id', c.id, 'before', jsonb_build_object('status', 'pending'),
               'after', jsonb_build_object('status', c.status)) ORDER BY c.id), '[]')
    INTO restored
    FROM changed c;
    -- a success the plan ran over with an attempt that failed: that run is dead, not cancelled
    -- (its earlier success no longer stands; the gap scan lists it, and what was coalesced
    -- into it, until it is rerun)
    WITH displaced AS (
        SELECT (x.v ->> 'run_id')::bigint AS id, (x.v -> 'before' ->> 'fence')::bigint AS fence
        FROM runner.requests q
        CROSS JOIN LATERAL jsonb_array_elements(q.touched -> 'runs_requeued') AS x(v)
        WHERE q.action = 'backfill' AND q.job_name = plan.job_name
          AND (q.touched -> 'backfill' ->> 'id')::bigint = plan.id
          AND x.v -> 'before' ->> 'status' = 'succeeded'
    ), target AS (
        SELECT r.id
        FROM displaced d
        JOIN runner.job_runs r ON r.id = d.id
        WHERE r.replay_group_id = plan.replay_group_id AND r.status = 'failed' AND r.fence > d.fence
        ORDER BY r.id
        FOR UPDATE OF r
    ), changed AS (
        UPDATE runner.job_runs r
        SET status = 'dead',
            next_attempt_at = NULL,
            finished_at = clock,
            status_reason = left(format('backfill %s cancelled by %s after its attempt failed: %s (the '
                                        'success before it was run over: rerun it)', plan.id, btrim(who),
                                        btrim(reason)), 1000),
            updated_at = clock
        FROM target t
        WHERE r.id = t.id
        RETURNING r.id
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'run_id', c.id, 'before', jsonb_build_object('status', 'failed'),
               'after', jsonb_build_object('status', 'dead')) ORDER BY c.id), '[]')
    INTO overrun
    FROM changed c;
    WITH target AS (
        SELECT r.id, r.status
        FROM runner.job_runs r
        WHERE r.replay_group_id = plan.replay_group_id AND r.status IN ('pending', 'failed')
        ORDER BY r.id
        FOR UPDATE OF r
    ), changed AS (
        UPDATE runner.job_runs r
        SET status = 'cancelled',
            next_attempt_at = NULL,
            finished_at = clock,
            status_reason = left(format('backfill %s cancelled by %s: %s', plan.id, btrim(who),
                                        btrim(reason)), 1000),
            updated_at = clock
        FROM target t
        WHERE r.id = t.id AND r.status = t.status
        RETURNING r.id, t.status AS before_status
    )
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'run_id', c.id, 'before', jsonb_build_object('status', c.before_status),
               'after', jsonb_build_object('status', 'cancelled')) ORDER BY c.id), '[]')
    INTO cancelled
    FROM changed c;
    req := runner.operator_request_v1('backfill_cancel', plan.job_name, who, reason, jsonb_build_object(
        'backfills', jsonb_build_array(jsonb_build_object(
            'id', plan.id, 'before', jsonb_build_object('status', plan.status),
            'after', jsonb_build_object('status', 'cancelled'))),
        'runs', cancelled, 'runs_restored', restored, 'runs_dead', overrun));
    RETURN QUERY SELECT req, jsonb_array_length(cancelled);
END
$$;
REVOKE ALL ON FUNCTION runner.cancel_backfill_v1(bigint, text, text, timestamptz) FROM PUBLIC;

-- verify: records the outcome of a completed plan's verify check, run again by the operator
-- (`runner backfill verify ID`: the check is the job's code, so the CLI runs it and passes
-- the outcome here). Only a completed plan; verify_status one of the four outcomes.
CREATE OR REPLACE FUNCTION runner.record_backfill_verify_v1(
    plan_id bigint, verify_status text, verify_detail jsonb, who text, reason text,
    as_of timestamptz DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    plan runner.backfills%ROWTYPE;
    req bigint;
BEGIN
    IF verify_status IS NULL OR verify_status NOT IN ('passed', 'failed', 'error', 'not_configured') THEN
        RAISE EXCEPTION 'verify_status must be passed, failed, error or not_configured; nothing written';
    END IF;
    plan := runner.lock_backfill_for_action(plan_id, 'verified', ARRAY['completed'], who, reason);
    UPDATE runner.backfills b
    SET verify_status = record_backfill_verify_v1.verify_status,
        verify_detail = record_backfill_verify_v1.verify_detail,
        verified_at = clock, updated_at = clock
    WHERE b.id = plan.id;
    req := runner.operator_request_v1('backfill_verify', plan.job_name, who, reason, jsonb_build_object(
        'backfills', jsonb_build_array(jsonb_build_object(
            'id', plan.id, 'before', jsonb_build_object('verify_status', plan.verify_status),
            'after', jsonb_build_object('verify_status', verify_status)))));
    RETURN req;
END
$$;
REVOKE ALL ON FUNCTION runner.record_backfill_verify_v1(bigint, text, jsonb, text, text, timestamptz)
FROM PUBLIC;
