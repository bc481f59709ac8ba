-- runner.checkpoint_v1: the one writer of a run's checkpoint (runner/checkpoints.py), called
-- by ctx.checkpoint(state) inside the handler's ctx.db transaction, which commits right after.
--
-- The run changes only while it is running under the attempt's fence: the UPDATE takes the
-- run's row lock and compares the fence in the same statement, so the checkpoint and the
-- handler's writes before it commit only if this attempt still owns the run. A takeover
-- (runner.start_attempts_v1: FOR UPDATE SKIP LOCKED on the run) either skips the run while
-- this transaction holds its row lock, or moved the fence first, and then this UPDATE
-- matches no row. Returns the run's checkpoint count after this one, or no row when the
-- attempt is stale (the caller rolls back and stops the handler).
--
-- state is any JSON value of at most max_bytes bytes as text (64 KiB, runner/checkpoints.py
-- MAX_BYTES; refused above it, nothing written); summary is kept to 200 characters.
--
-- Privileges: it runs as its owner (SECURITY DEFINER, fixed search_path): the worker role
-- has no UPDATE of a run's checkpoint columns, so only a fence holder can write them.
-- EXECUTE is revoked from PUBLIC; sql/roles.sql grants it to the worker.
CREATE OR REPLACE FUNCTION runner.checkpoint_v1(
    run_id bigint, fence bigint, state jsonb, summary text, max_bytes integer DEFAULT 65536)
RETURNS TABLE (checkpoints integer, checkpoint_at timestamptz, checkpoint_bytes integer)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    bytes constant integer := octet_length(state::text);
BEGIN
    IF bytes > least(coalesce(max_bytes, 65536), 65536) THEN
        RAISE EXCEPTION 'runner.checkpoint_v1: a checkpoint state of % bytes is over the limit of % bytes',
            bytes, least(coalesce(max_bytes, 65536), 65536)
            USING ERRCODE = 'program_limit_exceeded';
    END IF;
    RETURN QUERY
    UPDATE runner.job_runs r
    SET checkpoint = state,
        checkpoint_at = clock_timestamp(),
        checkpoint_fence = r.fence,
        checkpoint_bytes = bytes,
        checkpoint_summary = left(summary, 200),
        checkpoints = r.checkpoints + 1
    WHERE r.id = run_id AND r.fence = fence AND r.status = 'running'
    RETURNING r.checkpoints, r.checkpoint_at, r.checkpoint_bytes;
END
$$;
REVOKE ALL ON FUNCTION runner.checkpoint_v1(bigint, bigint, jsonb, text, integer) FROM PUBLIC;
