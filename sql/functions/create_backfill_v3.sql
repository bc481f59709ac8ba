-- runner.create_backfill_v3: `runner backfill JOB --from A --to B ...` in the database, as
-- runner.create_backfill_v2 (see its header: the checks, the writes, the request row, the
-- return value) with `pause_every` (schema step 0012_pauseevery, `runner backfill
-- --pause-every`): the seconds between two evaluations of the plan's pause condition across
-- all runners, 1 to 3600 (the table's constraint); NULL stores the column's default, 5. The
-- request row's `backfill` names it. runner.create_backfill_v2 and _v1 stay for the clients
-- that call them: their plans get the default.
CREATE OR REPLACE FUNCTION runner.create_backfill_v3(
    job_name text, range_from timestamptz, range_to timestamptz, partitions text[], lane text,
    concurrency integer, rate double precision, max_failures integer, pause_when text,
    force boolean, slots timestamptz[], partition_keys text[], business_dates date[],
    window_starts timestamptz[], window_ends timestamptz[], idempotency_keys text[],
    who text, reason text, as_of timestamptz DEFAULT NULL, resume boolean DEFAULT false,
    pause_every integer DEFAULT NULL)
RETURNS TABLE (backfill_id bigint, request_id bigint, inserted integer, requeued jsonb)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    n integer := coalesce(cardinality(slots), 0);
    plan runner.backfills%ROWTYPE;
    expected integer;
    run_reason text;
    queued jsonb;
    added integer;
    req bigint;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    IF n = 0 THEN
        RAISE EXCEPTION 'a backfill needs at least one slot x partition; nothing written';
    END IF;
    IF coalesce(cardinality(partition_keys), -1) <> n OR coalesce(cardinality(business_dates), -1) <> n
       OR coalesce(cardinality(window_starts), -1) <> n OR coalesce(cardinality(window_ends), -1) <> n
       OR coalesce(cardinality(idempotency_keys), -1) <> n THEN
        RAISE EXCEPTION 'the slot x partition arrays differ in length; nothing written';
    END IF;
    IF range_from IS NULL OR range_to IS NULL OR NOT range_from < range_to THEN
        RAISE EXCEPTION 'the range must be [from, to) with from before to; nothing written';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(slots) AS t(s) WHERE s > clock) THEN
        RAISE EXCEPTION 'the range reaches past now: slot % is not due yet (now is %); a backfill runs only slots that are due; nothing written',
            (SELECT min(s) FROM unnest(slots) AS t(s) WHERE s > clock), clock;
    END IF;
    -- the plan's range ends at now at the latest (its runs of a range are judged over it)
    range_to := least(range_to, clock + interval '1 microsecond');
    IF EXISTS (SELECT 1 FROM unnest(slots, partition_keys, business_dates, window_starts, window_ends,
                                    idempotency_keys) AS t(s, p, d, ws, we, k)
               WHERE s IS NULL OR p IS NULL OR d IS NULL OR ws IS NULL OR we IS NULL OR k IS NULL
                  OR s < range_from OR s >= range_to
                  OR (partitions IS NOT NULL AND NOT p = ANY(partitions))) THEN
        RAISE EXCEPTION 'a slot x partition lies outside the plan (its range [%, %) and partitions); nothing written',
            range_from, range_to;
    END IF;
    SELECT count(*) INTO expected
    FROM (SELECT DISTINCT s, p FROM unnest(slots, partition_keys) AS t(s, p)) AS d;

    INSERT INTO runner.backfills AS b (
        job_name, range_from, range_to, partitions, lane, concurrency, rate, max_failures,
        pause_when, pause_every, force, resume, status, expected_runs, tokens, tokens_at,
        requested_by, reason, created_at, updated_at)
    VALUES (job_name, range_from, range_to, partitions, lane, concurrency, rate, max_failures,
            pause_when, coalesce(pause_every, 5), coalesce(force, false), coalesce(resume, false),
            'running', expected, 1, clock, btrim(who), btrim(reason), clock, clock)
    RETURNING * INTO plan;
    run_reason := left(format('backfill %s: %s', plan.id, btrim(reason)), 1000);

    WITH input AS (
        SELECT DISTINCT t.schedule_slot, t.partition_key
        FROM unnest(slots, partition_keys) AS t(schedule_slot, partition_key)
    ), target AS (
        SELECT r.id, r.status, r.trigger, r.attempt, r.fence, r.uncounted_attempts, r.last_error,
               r.replay_group_id, r.lane, r.finished_at, r.status_reason, r.coalesced_into_slot,
               r.processed_count, r.failed_count, r.checkpoint_at, r.checkpoint_fence,
               r.checkpoint_bytes, r.checkpoint_summary
        FROM input i
        JOIN runner.job_runs r
          ON r.job_name = plan.job_name AND r.schedule_slot = i.schedule_slot
         AND r.partition_key = i.partition_key
        WHERE (r.status IN ('failed', 'dead', 'skipped', 'coalesced', 'awaiting_approval', 'cancelled')
               OR (plan.force AND r.status = 'succeeded'))
          AND NOT EXISTS (SELECT 1 FROM runner.backfills o
                          WHERE o.replay_group_id = r.replay_group_id
                            AND o.status IN ('planned', 'running', 'paused'))
        ORDER BY r.id
        FOR UPDATE OF r
    ), changed AS (
        UPDATE runner.job_runs r
        SET status = 'pending',
            trigger = 'backfill',
            replay_group_id = plan.replay_group_id,
            lane = plan.lane,
            next_attempt_at = NULL,
            uncounted_attempts = r.attempt,
            finished_at = NULL,
            processed_count = 0,
            failed_count = 0,
            coalesced_into_slot = NULL,
            status_reason = run_reason,
            -- from scratch unless the plan resumes (0011_resume): else ctx.resume is None
            checkpoint = CASE WHEN plan.resume THEN r.checkpoint END,
            checkpoint_at = CASE WHEN plan.resume THEN r.checkpoint_at END,
            checkpoint_fence = CASE WHEN plan.resume THEN r.checkpoint_fence END,
            checkpoint_bytes = CASE WHEN plan.resume THEN r.checkpoint_bytes END,
            checkpoint_summary = CASE WHEN plan.resume THEN r.checkpoint_summary END,
            updated_at = clock
        FROM target t
        WHERE r.id = t.id AND r.status = t.status
        RETURNING r.id, r.schedule_slot, r.partition_key, t.status AS before_status,
                  t.trigger AS before_trigger, t.attempt AS before_attempt, t.fence AS before_fence,
                  t.uncounted_attempts AS before_uncounted_attempts, t.last_error AS before_last_error,
                  t.replay_group_id AS before_replay_group_id, t.lane AS before_lane,
                  t.finished_at AS before_finished_at, t.status_reason AS before_status_reason,
                  t.coalesced_into_slot AS before_coalesced_into_slot,
                  t.processed_count AS before_processed_count, t.failed_count AS before_failed_count,
                  t.checkpoint_at AS before_checkpoint_at, t.checkpoint_fence AS before_checkpoint_fence,
                  t.checkpoint_bytes AS before_checkpoint_bytes,
                  t.checkpoint_summary AS before_checkpoint_summary
    )
    SELECT coalesce(jsonb_agg(to_jsonb(c) ORDER BY c.id), '[]') INTO queued FROM changed c;

    WITH input AS (
        SELECT *
        FROM unnest(slots, partition_keys, business_dates, window_starts, window_ends, idempotency_keys)
             AS t(schedule_slot, partition_key, business_date, window_start, window_end, idempotency_key)
    ), added_runs AS (
        INSERT INTO runner.job_runs AS r (
            job_name, schedule_slot, partition_key, business_date, window_start, window_end, status,
            trigger, idempotency_key, replay_group_id, lane, scheduled_at, status_reason, updated_at)
        SELECT plan.job_name, i.schedule_slot, i.partition_key, i.business_date, i.window_start,
               i.window_end, 'pending', 'backfill', i.idempotency_key, plan.replay_group_id, plan.lane,
               clock, run_reason, clock
        FROM input i
        ON CONFLICT ON CONSTRAINT job_runs_business_key DO NOTHING
        RETURNING r.id
    )
    SELECT count(*) INTO added FROM added_runs;

    req := runner.operator_request_v1('backfill', plan.job_name, who, reason, jsonb_build_object(
        'backfill', jsonb_build_object(
            'id', plan.id, 'replay_group_id', plan.replay_group_id, 'job_name', plan.job_name,
            'range_from', plan.range_from, 'range_to', plan.range_to, 'partitions', plan.partitions,
            'lane', plan.lane, 'concurrency', plan.concurrency, 'rate', plan.rate,
            'max_failures', plan.max_failures, 'pause_when', plan.pause_when,
            'pause_every', plan.pause_every, 'force', plan.force,
            'resume', plan.resume, 'expected_runs', plan.expected_runs),
        'runs_inserted', added,
        'runs_requeued', (
            SELECT coalesce(jsonb_agg(jsonb_build_object(
                'run_id', x.v -> 'id', 'slot', x.v -> 'schedule_slot',
                'partition_key', x.v -> 'partition_key',
                'before', jsonb_build_object(
                    'status', x.v -> 'before_status', 'trigger', x.v -> 'before_trigger',
                    'attempt', x.v -> 'before_attempt', 'fence', x.v -> 'before_fence',
                    'uncounted_attempts', x.v -> 'before_uncounted_attempts',
                    'replay_group_id', x.v -> 'before_replay_group_id', 'lane', x.v -> 'before_lane',
                    'finished_at', x.v -> 'before_finished_at',
                    'status_reason', x.v -> 'before_status_reason',
                    'coalesced_into_slot', x.v -> 'before_coalesced_into_slot',
                    'processed_count', x.v -> 'before_processed_count',
                    'failed_count', x.v -> 'before_failed_count'),
                'after', jsonb_build_object('status', 'pending', 'trigger', 'backfill'),
                'checkpoint', CASE WHEN x.v ->> 'before_checkpoint_at' IS NOT NULL THEN jsonb_build_object(
                    'at', x.v -> 'before_checkpoint_at', 'fence', x.v -> 'before_checkpoint_fence',
                    'bytes', x.v -> 'before_checkpoint_bytes', 'summary', x.v -> 'before_checkpoint_summary',
                    'kept', plan.resume) END)
                ORDER BY x.n), '[]')
            FROM jsonb_array_elements(queued) WITH ORDINALITY AS x(v, n)),
        'runs_left_alone', plan.expected_runs - jsonb_array_length(queued) - added));

    RETURN QUERY SELECT plan.id, req, added, queued;
END
$$;
REVOKE ALL ON FUNCTION runner.create_backfill_v3(
    text, timestamptz, timestamptz, text[], text, integer, double precision, integer, text, boolean,
    timestamptz[], text[], date[], timestamptz[], timestamptz[], text[], text, text, timestamptz, boolean,
    integer)
FROM PUBLIC;
