-- runner.rerun_v1: `runner rerun` in the database. Queues one run for a new attempt (trigger
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
-- Since revision 0009_checkpoints it is runner.rerun_v2 without `resume` (kept for the
-- clients that call it): a rerun from scratch, the run's checkpoint state cleared.
CREATE OR REPLACE FUNCTION runner.rerun_v1(
    run_id bigint, seen_status text, seen_fence bigint, force boolean, who text, reason text,
    as_of timestamptz DEFAULT NULL)
RETURNS TABLE (request_id bigint, id bigint, status text, trigger text, attempt integer,
               fence bigint, uncounted_attempts integer, next_attempt_at timestamptz)
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT * FROM runner.rerun_v2(run_id, seen_status, seen_fence, force, who, reason, as_of, false)
$$;
REVOKE ALL ON FUNCTION runner.rerun_v1(bigint, text, bigint, boolean, text, text, timestamptz) FROM PUBLIC;
