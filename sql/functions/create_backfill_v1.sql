-- runner.create_backfill_v1: `runner backfill JOB --from A --to B ...` in the database, as
-- older runners and runner.tier_backfill_v1 call it. Since schema step 0011_resume it is
-- runner.create_backfill_v2 without `resume` (kept for the clients that call it): the runs it
-- queues again start from scratch, their checkpoint state cleared. Its checks, writes and
-- return value are runner.create_backfill_v2's (see there).
CREATE OR REPLACE FUNCTION runner.create_backfill_v1(
    job_name text, range_from timestamptz, range_to timestamptz, partitions text[], lane text,
    concurrency integer, rate double precision, max_failures integer, pause_when text,
    force boolean, slots timestamptz[], partition_keys text[], business_dates date[],
    window_starts timestamptz[], window_ends timestamptz[], idempotency_keys text[],
    who text, reason text, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (backfill_id bigint, request_id bigint, inserted integer, requeued jsonb)
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT * FROM runner.create_backfill_v2(
    job_name, range_from, range_to, partitions, lane, concurrency, rate, max_failures, pause_when, force,
    slots, partition_keys, business_dates, window_starts, window_ends, idempotency_keys, who, reason, as_of,
    false)
$$;
REVOKE ALL ON FUNCTION runner.create_backfill_v1(
    text, timestamptz, timestamptz, text[], text, integer, double precision, integer, text, boolean,
    timestamptz[], text[], date[], timestamptz[], timestamptz[], text[], text, text, timestamptz)
FROM PUBLIC;
