-- runner.advance_watermarks_v1(as_of): every job's gap-scan watermark up to as_of in one call,
-- with no cap; returns how many jobs' watermarks moved. Since revision 0020_bounded it is
-- runner.advance_watermarks_v2 with no max_span (sql/functions/advance_watermarks_v2.sql says
-- what a watermark is and why this runner's own duty calls v2 with a cap instead). Kept for
-- runners of earlier revisions during a rolling upgrade, for scripts and for tests.
CREATE OR REPLACE FUNCTION runner.advance_watermarks_v1(as_of timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT a.moved FROM runner.advance_watermarks_v2(as_of, NULL, NULL, true) AS a
$$;

REVOKE ALL ON FUNCTION runner.advance_watermarks_v1(timestamptz) FROM PUBLIC;
