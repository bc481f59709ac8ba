-- runner.lane_spend_v1: a claim of queued runs pays its lanes' rate buckets for the attempts
-- it started (revision 0011_lanes): per lane, tokens = the bucket refilled up to now, minus
-- the starts. Called in the same statement as runner.lane_budget_v1, whose row locks it
-- relies on; lanes without a rate are left alone. Returns the number of lanes charged.
-- SECURITY DEFINER; EXECUTE for the worker role only.
CREATE OR REPLACE FUNCTION runner.lane_spend_v1(lanes text[], starts integer[], as_of timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
WITH spent AS (
    SELECT t.lane, sum(t.n)::float8 AS n
    FROM unnest(lanes, starts) AS t(lane, n)
    WHERE t.n > 0
    GROUP BY t.lane
), charged AS (
    UPDATE runner.lanes l
    SET tokens = least(greatest(l.rate, 1.0),
                       l.tokens + l.rate * greatest(extract(epoch FROM coalesce(as_of, clock_timestamp())
                                                                       - l.tokens_at)::float8, 0.0)) - s.n,
        tokens_at = greatest(l.tokens_at, coalesce(as_of, clock_timestamp()))
    FROM spent s
    WHERE l.lane = s.lane AND l.rate IS NOT NULL
    RETURNING 1
)
SELECT count(*)::integer FROM charged
$$;
REVOKE ALL ON FUNCTION runner.lane_spend_v1(text[], integer[], timestamptz) FROM PUBLIC;
