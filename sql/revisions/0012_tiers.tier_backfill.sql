-- runner.tier_backfill_v1: the backfill plan of a misfire tier (runner/tiers.py, action
-- backfill), made by the misfire duty of a runner (runner/misfire.py) for the late slot x
-- partitions of one range. It is `runner backfill` made by the runner: it calls
-- runner.create_backfill_v1, so the plan, its runs and its runner.requests row (action
-- backfill, who 'runner (misfire tier NAME)', db_user = session_user: the worker's login) are
-- written in the caller's transaction exactly as an operator's would be.
--
-- The caller chooses only the slots and the tier's name. The plan's options (lane,
-- concurrency, rate, max_failures, pause_when) come from the tier as the job's definition
-- row stores it (runner.jobs.options -> 'misfire_tiers'); a tier that is not a backfill tier
-- of the job is refused. Exactly once: the job's row is locked (FOR NO KEY UPDATE, as the
-- misfire duty locks it) and any slot x partition that already has a run is refused, so two
-- runners deciding the same downtime at once make one plan: the second waits for the first,
-- then finds the runs and is refused (the duty checks first, under the same lock, and does
-- not call). Each run of the plan gets its runner.misfire_decisions row (tier, action
-- backfill, lateness, reason, the plan).
--
-- SECURITY DEFINER with a fixed search_path; EXECUTE for the worker role only (sql/roles.sql).
-- Returns the plan's id, the request's id and how many runs it inserted.
CREATE OR REPLACE FUNCTION runner.tier_backfill_v1(
    job_name text, tier text, lateness interval, slots timestamptz[], partition_keys text[],
    business_dates date[], window_starts timestamptz[], window_ends timestamptz[],
    idempotency_keys text[], reason text, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (backfill_id bigint, request_id bigint, inserted integer)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    spec jsonb;
    plan record;
    gid uuid;
BEGIN
    IF coalesce(btrim(tier), '') = '' OR coalesce(btrim(reason), '') = '' OR lateness IS NULL THEN
        RAISE EXCEPTION 'a tier, its lateness and a reason are needed; nothing written';
    END IF;
    IF coalesce(cardinality(slots), 0) = 0 THEN
        RAISE EXCEPTION 'a tier plan needs at least one slot x partition; nothing written';
    END IF;
    SELECT t.value INTO spec
    FROM runner.jobs j
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(j.options -> 'misfire_tiers' -> 'tiers') = 'array'
             THEN j.options -> 'misfire_tiers' -> 'tiers' ELSE '[]'::jsonb END) AS t(value)
    WHERE j.job_name = tier_backfill_v1.job_name
      AND t.value ->> 'name' = tier AND t.value ->> 'action' = 'backfill';
    IF spec IS NULL THEN
        RAISE EXCEPTION 'job % has no backfill tier %; nothing written',
            quote_literal(tier_backfill_v1.job_name), quote_literal(tier);
    END IF;
    PERFORM 1 FROM runner.jobs j WHERE j.job_name = tier_backfill_v1.job_name FOR NO KEY UPDATE;
    IF EXISTS (SELECT 1
               FROM unnest(slots, partition_keys) AS t(s, p)
               JOIN runner.job_runs r ON r.job_name = tier_backfill_v1.job_name
                                     AND r.schedule_slot = t.s AND r.partition_key = t.p) THEN
        RAISE EXCEPTION 'a slot x partition of this tier plan already has a run (decided by another runner?); nothing written';
    END IF;

    SELECT c.backfill_id, c.request_id, c.inserted INTO plan
    FROM runner.create_backfill_v1(
        tier_backfill_v1.job_name, (SELECT min(s) FROM unnest(slots) AS s),
        (SELECT max(s) FROM unnest(slots) AS s) + interval '1 microsecond', NULL::text[],
        spec ->> 'lane', coalesce((spec ->> 'concurrency')::integer, 1),
        (spec ->> 'rate')::double precision, (spec ->> 'max_failures')::integer,
        nullif(btrim(spec ->> 'pause_when'), ''), false, slots, partition_keys, business_dates,
        window_starts, window_ends, idempotency_keys,
        format('runner (misfire tier %s)', tier), reason, as_of) AS c;

    SELECT b.replay_group_id INTO gid FROM runner.backfills b WHERE b.id = plan.backfill_id;
    INSERT INTO runner.misfire_decisions (run_id, job_name, schedule_slot, partition_key, tier,
                                          action, lateness, slot_lateness, alert, reason,
                                          backfill_id, decided_at)
    SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, tier, 'backfill', lateness,
           clock - r.schedule_slot, coalesce((spec ->> 'alert')::boolean, true), reason,
           plan.backfill_id, clock
    FROM runner.job_runs r
    WHERE r.replay_group_id = gid;

    RETURN QUERY SELECT plan.backfill_id, plan.request_id, plan.inserted;
END
$$;
REVOKE ALL ON FUNCTION runner.tier_backfill_v1(
    text, text, interval, timestamptz[], text[], date[], timestamptz[], timestamptz[], text[], text,
    timestamptz)
FROM PUBLIC;
