-- runner.lane_budget_v1: what a claim of queued runs may start in each of the given lanes,
-- fleet-wide (revision 0011_lanes). Called inside the claim statements of queued runs
-- (claim_due_runs, claim_plan_runs), before they start anything.
--
-- For each lane with a fleet limit (concurrency or rate), it first takes the lane row's
-- lock (FOR UPDATE, in lane order, held until the caller's transaction ends), and only then
-- counts the lane's running runs: a later statement of a VOLATILE function takes a new
-- snapshot, so the count sees every run that another process's claim of the same lane
-- started and committed before it released the lock. So two processes claiming the lane's
-- last unit at once are serialised: the second sees the first's run and gets nothing.
-- Lanes without a limit are neither locked nor counted (room and tokens NULL: no limit).
--
-- Returns one row per known lane: its rank (priority, lower first), room (how many more of
-- its runs may run now, >= 0; NULL: no limit), tokens (the rate bucket refilled up to now;
-- NULL: no rate) and at (clock_timestamp() once the locks are held: the instant the caller's
-- attempts start, so that the ledger's attempt times never show a unit used twice).
-- SECURITY DEFINER (the worker role has no UPDATE on runner.lanes, which FOR UPDATE needs);
-- EXECUTE for the worker role only.
CREATE OR REPLACE FUNCTION runner.lane_budget_v1(lanes text[], as_of timestamptz DEFAULT NULL)
RETURNS TABLE (lane text, rank integer, room integer, tokens double precision, at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    clock timestamptz;
BEGIN
    PERFORM 1 FROM runner.lanes l
    WHERE l.lane = ANY (lanes) AND (l.concurrency IS NOT NULL OR l.rate IS NOT NULL)
    ORDER BY l.lane
    FOR UPDATE OF l;
    clock := coalesce(as_of, clock_timestamp());
    RETURN QUERY
    SELECT l.lane, l.rank,
           CASE WHEN l.concurrency IS NULL THEN NULL
                ELSE greatest(l.concurrency - (SELECT count(*) FROM runner.job_runs r
                                               WHERE r.lane = l.lane AND r.status = 'running'), 0)::integer
           END,
           CASE WHEN l.rate IS NULL THEN NULL
                ELSE least(greatest(l.rate, 1.0),
                           l.tokens + l.rate * greatest(extract(epoch FROM clock - l.tokens_at)::float8, 0.0))
           END,
           clock
    FROM runner.lanes l
    WHERE l.lane = ANY (lanes)
    ORDER BY l.rank, l.lane;
END
$$;
REVOKE ALL ON FUNCTION runner.lane_budget_v1(text[], timestamptz) FROM PUBLIC;
