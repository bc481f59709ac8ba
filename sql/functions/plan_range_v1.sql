-- runner.plan_range_v1: what a backfill plan whose own runs are all finished still owes its
-- range, asked by the lane (runner/backfill.py, _plan_pass) before it completes the plan
-- (issue 26, defect 7: a plan that overlapped another one said `completed` over runs it never
-- ran). A plan's *range* is its job's runs with a slot in [range_from, range_to) (and a
-- partition among `partitions` when it names them) that belong to a plan: its own group's,
-- and those an overlapping plan held when this one was created (which it left alone).
--
-- In this order:
--   * foreign_unfinished: runs of its range in another live plan (planned, running, paused)
--     that are pending, running or failed: the plan waits for them (returns at once);
--   * adopted: runs of its range left by an earlier plan that is over (cancelled, or completed)
--     as cancelled or dead are taken into this plan's group, queued again for the lane
--     (pending, trigger backfill, a full attempt budget, this plan's lane; the reason says
--     from which plan): the plan runs them (returns at once);
--   * not_done, not_done_by_status: the runs of its range that are not succeeded, skipped or
--     coalesced. The caller completes the plan only when this is 0, and else pauses it
--     saying so: `completed` means every run of its range is done.
-- Runs as the schema owner (SECURITY DEFINER, fixed search_path): the worker role holds no
-- UPDATE of a run's status. EXECUTE for the worker role only (sql/roles.sql).
CREATE OR REPLACE FUNCTION runner.plan_range_v1(plan_id bigint, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (foreign_unfinished integer, adopted integer, not_done integer, not_done_by_status jsonb)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    plan runner.backfills%ROWTYPE;
    waiting integer;
    took integer;
    missing integer;
    by_status jsonb;
BEGIN
    SELECT * INTO plan FROM runner.backfills b WHERE b.id = plan_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no backfill % (see `runner backfill list`)', plan_id;
    END IF;

    SELECT count(*) INTO waiting
    FROM runner.backfills o
    JOIN runner.job_runs r
      ON r.replay_group_id = o.replay_group_id AND r.status IN ('pending', 'running', 'failed')
    WHERE o.job_name = plan.job_name AND o.id <> plan.id
      AND o.status IN ('planned', 'running', 'paused')
      AND o.range_from < plan.range_to AND plan.range_from < o.range_to
      AND r.job_name = plan.job_name
      AND r.schedule_slot >= plan.range_from AND r.schedule_slot < plan.range_to
      AND (plan.partitions IS NULL OR r.partition_key = ANY(plan.partitions));
    IF waiting > 0 THEN
        RETURN QUERY SELECT waiting, 0, 0, '{}'::jsonb;
        RETURN;
    END IF;

    WITH target AS (
        SELECT r.id, r.status, o.id AS from_plan
        FROM runner.backfills o
        JOIN runner.job_runs r
          ON r.replay_group_id = o.replay_group_id AND r.status IN ('cancelled', 'dead')
        WHERE o.job_name = plan.job_name AND o.id < plan.id
          AND o.status IN ('cancelled', 'completed')
          AND o.range_from < plan.range_to AND plan.range_from < o.range_to
          AND r.job_name = plan.job_name
          AND r.schedule_slot >= plan.range_from AND r.schedule_slot < plan.range_to
          AND (plan.partitions IS NULL OR r.partition_key = ANY(plan.partitions))
        ORDER BY r.id
        FOR UPDATE OF r SKIP LOCKED
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
            status_reason = left(format('backfill %s: adopted from backfill %s (it left this run %s)',
                                        plan.id, t.from_plan, t.status), 1000),
            updated_at = clock
        FROM target t
        WHERE r.id = t.id AND r.status = t.status
        RETURNING r.id
    )
    SELECT count(*) INTO took FROM changed;
    IF took > 0 THEN
        RETURN QUERY SELECT 0, took, 0, '{}'::jsonb;
        RETURN;
    END IF;

    WITH ranged AS (
        SELECT r.status
        FROM runner.job_runs r
        WHERE r.replay_group_id = plan.replay_group_id
        UNION ALL
        SELECT r.status
        FROM runner.backfills o
        JOIN runner.job_runs r ON r.replay_group_id = o.replay_group_id
        WHERE o.job_name = plan.job_name AND o.id <> plan.id
          AND o.range_from < plan.range_to AND plan.range_from < o.range_to
          AND r.job_name = plan.job_name
          AND r.schedule_slot >= plan.range_from AND r.schedule_slot < plan.range_to
          AND (plan.partitions IS NULL OR r.partition_key = ANY(plan.partitions))
    ), counted AS (
        SELECT g.status, count(*)::integer AS n
        FROM ranged g
        WHERE g.status NOT IN ('succeeded', 'skipped', 'coalesced')
        GROUP BY g.status
    )
    SELECT coalesce(sum(c.n), 0)::integer, coalesce(jsonb_object_agg(c.status, c.n), '{}'::jsonb)
    INTO missing, by_status
    FROM counted c;
    RETURN QUERY SELECT 0, 0, missing, by_status;
END
$$;
REVOKE ALL ON FUNCTION runner.plan_range_v1(bigint, timestamptz) FROM PUBLIC;
