-- runner.advance_watermarks_v2(as_of, max_span, max_probes, tidy): runner.advance_watermarks_v3,
-- for the runners of release 0011 that call it while they run (same arguments, same result;
-- sql/functions/advance_watermarks_v3.sql states the design).
CREATE OR REPLACE FUNCTION runner.advance_watermarks_v2(
    as_of timestamptz DEFAULT NULL, max_span interval DEFAULT NULL, max_probes integer DEFAULT NULL,
    tidy boolean DEFAULT true, OUT moved integer, OUT behind integer)
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off  -- as for runner.missing_slots_v1: compiling costs more than running
AS $$
    SELECT * FROM runner.advance_watermarks_v3(as_of, max_span, max_probes, tidy)
$$;
REVOKE ALL ON FUNCTION runner.advance_watermarks_v2(timestamptz, interval, integer, boolean) FROM PUBLIC;
