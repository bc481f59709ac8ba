-- runner.rerun_v2: `runner rerun` in the database (rerun_v1 with `resume`, issue 33; rerun_v1 calls it). Queues one run for a new attempt (trigger
-- manual, due now) and writes its runner.requests row, in the caller's transaction, or
-- changes nothing and raises.
--
-- The operator was shown the run (its status and fence, seen_status and seen_fence): under
-- the run's row lock it must still be so, and the transition must be allowed: a running or
-- pending run is refused, a succeeded or coalesced one needs force. The run's earlier
-- attempts stop counting against max_attempts (uncounted_attempts = attempt), so it gets a
-- full budget of attempts; the loop of any live runner then starts its next attempt (attempt
-- + 1, fence + 1) through runner.start_attempts_v1. A rerun runs in the correction lane
-- (revision 0011_lanes): served by the processes that serve it, under its fleet budget.
--
-- Every operator action is such a function (revision 0007_security): it runs as its owner
-- (SECURITY DEFINER, fixed search_path), so the operator role holds no INSERT or UPDATE on
-- the ledger at all and cannot change a run, or write a request, any other way. `who` is the
-- operator's claim (--by); db_user is session_user, the login that called, which the caller
-- cannot choose. A refusal is raised as P0001 (raise_exception) with a one-line message.
-- EXECUTE is revoked from PUBLIC; sql/roles.sql grants it to the operator role.
--
-- Checkpoints (revision 0009_checkpoints, runner/checkpoints.py): a rerun starts from scratch:
-- the run's last checkpoint state is cleared (its count of checkpoints stays), so the next
-- attempt's ctx.resume is None; unless `resume`, when the state is kept and the next attempt
-- continues from it. The request row records which, with the checkpoint it kept or cleared.
-- The requeue itself is runner.requeue_manual_v1's (runner.rerun_runs_v1's too); the request
-- row is written by runner.operator_request_v1.
CREATE OR REPLACE FUNCTION runner.rerun_v2(
    run_id bigint, seen_status text, seen_fence bigint, force boolean, who text, reason text,
    as_of timestamptz DEFAULT NULL, resume boolean DEFAULT false)
RETURNS TABLE (request_id bigint, id bigint, status text, trigger text, attempt integer,
               fence bigint, uncounted_attempts integer, next_attempt_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    r runner.job_runs%ROWTYPE;
    req bigint;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    SELECT * INTO r FROM runner.job_runs j WHERE j.id = run_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'run % no longer exists; nothing written', run_id;
    END IF;
    IF r.status IS DISTINCT FROM seen_status OR r.fence IS DISTINCT FROM seen_fence THEN
        RAISE EXCEPTION 'run % changed since it was shown (now %, fence %); nothing written: run the command again',
            r.id, r.status, r.fence;
    END IF;
    IF r.status = 'running' THEN
        RAISE EXCEPTION 'run % is running (attempt %, fence %): a run in flight cannot be rerun; nothing written',
            r.id, r.attempt, r.fence;
    ELSIF r.status = 'pending' THEN
        RAISE EXCEPTION 'run % is already pending (its next attempt is due at %); nothing written',
            r.id, coalesce(to_jsonb(r.next_attempt_at) #>> '{}', 'once approved');
    ELSIF r.status IN ('succeeded', 'coalesced') AND NOT coalesce(force, false) THEN
        RAISE EXCEPTION 'run % already %: pass --force to run it again; nothing written', r.id, r.status;
    END IF;

    req := runner.operator_request_v1('rerun', r.job_name, who, reason, jsonb_build_object(
        'runs', jsonb_build_array(jsonb_build_object(
            'run_id', r.id,
            'slot', r.schedule_slot,
            'partition_key', r.partition_key,
            'before', jsonb_build_object(
                'status', r.status, 'trigger', r.trigger, 'attempt', r.attempt, 'fence', r.fence,
                'uncounted_attempts', r.uncounted_attempts, 'processed_count', r.processed_count,
                'failed_count', r.failed_count, 'last_error', r.last_error),
            'after', jsonb_build_object(
                'status', 'pending', 'trigger', 'manual', 'uncounted_attempts', r.attempt),
            'checkpoint', CASE WHEN r.checkpoint_at IS NOT NULL THEN jsonb_build_object(
                'at', r.checkpoint_at, 'fence', r.checkpoint_fence, 'bytes', r.checkpoint_bytes,
                'summary', r.checkpoint_summary,
                'kept', coalesce(resume, false)) END)),
        'force', coalesce(force, false), 'resume', coalesce(resume, false)));

    RETURN QUERY
    SELECT * FROM runner.requeue_manual_v1(ARRAY[r.id], req, reason, clock, coalesce(resume, false));
END
$$;
REVOKE ALL ON FUNCTION runner.rerun_v2(bigint, text, bigint, boolean, text, text, timestamptz, boolean) FROM PUBLIC;
