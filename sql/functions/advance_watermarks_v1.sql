-- runner.advance_watermarks_v1(as_of): every job's gap-scan watermark up to as_of in one call,
-- with no cap; returns how many jobs' watermark rows it wrote. It is the runners' own
-- advance, runner.advance_watermarks_v3, with no cap (sql/functions/advance_watermarks_v3.sql
-- says what a watermark is and why the runners' duty calls it with a cap instead). Kept for
-- runners of earlier revisions during a rolling upgrade, for scripts and for tests.
CREATE OR REPLACE FUNCTION runner.advance_watermarks_v1(as_of timestamptz DEFAULT NULL)
RETURNS integer
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT a.moved FROM runner.advance_watermarks_v3(as_of, NULL, NULL, true) AS a
$$;

REVOKE ALL ON FUNCTION runner.advance_watermarks_v1(timestamptz) FROM PUBLIC;
