-- runner.create_backfill_v2: runner.create_backfill_v3 with the default pace of a plan's pause
-- condition (5 s), for the clients of schema 0011_resume that call it (issue 33's `resume`;
-- create_backfill_v1 calls it in turn). Everything it checks, writes and returns is v3's:
-- see that file's header.
CREATE OR REPLACE FUNCTION runner.create_backfill_v2(
    job_name text, range_from timestamptz, range_to timestamptz, partitions text[], lane text,
    concurrency integer, rate double precision, max_failures integer, pause_when text,
    force boolean, slots timestamptz[], partition_keys text[], business_dates date[],
    window_starts timestamptz[], window_ends timestamptz[], idempotency_keys text[],
    who text, reason text, as_of timestamptz DEFAULT NULL, resume boolean DEFAULT false)
RETURNS TABLE (backfill_id bigint, request_id bigint, inserted integer, requeued jsonb)
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT * FROM runner.create_backfill_v3(
        job_name, range_from, range_to, partitions, lane, concurrency, rate, max_failures, pause_when,
        force, slots, partition_keys, business_dates, window_starts, window_ends, idempotency_keys,
        who, reason, as_of, resume, NULL)
$$;
REVOKE ALL ON FUNCTION runner.create_backfill_v2(
    text, timestamptz, timestamptz, text[], text, integer, double precision, integer, text, boolean,
    timestamptz[], text[], date[], timestamptz[], timestamptz[], text[], text, text, timestamptz, boolean)
FROM PUBLIC;
