-- runner.decide_runs_v1: `runner approve` / `runner skip` in the database. Decides the given
-- runs of one job that are still awaiting approval, and writes one runner.requests row
-- (action approve or skip: the operator's selection, every run decided with its state before
-- and after, and the ids left alone because they no longer await approval), in the caller's
-- transaction.
--   approve: pending, trigger manual, due now, with a full budget of attempts (the attempts
--            it had stop counting: uncounted_attempts = attempt);
--   skip:    skipped with the reason, final; and the runs coalesced into a skipped run are
--            skipped with it (their cover will never run, so its decision is theirs: without
--            this they were coalesced into nothing, uncovered and unlisted by the gap scan;
--            runner.run_covered_v1), listed in the request as coalesced_runs.
-- Only runs of job_name in status awaiting_approval change; when none does, it raises and
-- writes nothing. Like every operator action (see runner.rerun_v1): SECURITY DEFINER with a
-- fixed search_path, db_user = session_user, refusals raised as P0001, EXECUTE for the
-- operator role only.
CREATE OR REPLACE FUNCTION runner.decide_runs_v1(
    action text, job_name text, run_ids bigint[], selection jsonb, who text, reason text,
    as_of timestamptz DEFAULT NULL)
RETURNS TABLE (request_id bigint, id bigint, schedule_slot timestamptz, partition_key text,
               before_status text, before_trigger text, before_attempt integer,
               before_uncounted_attempts integer, before_reason text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    verb text;
    req bigint;
    changed_rows jsonb;
    decided jsonb;
    done bigint[];
    followed jsonb := '[]';
BEGIN
    IF action IS NULL OR action NOT IN ('approve', 'skip') THEN
        RAISE EXCEPTION 'action must be approve or skip; nothing written';
    END IF;
    PERFORM runner.operator_who_v1(who, reason);
    verb := CASE action WHEN 'approve' THEN 'approved' ELSE 'skipped' END;

    WITH target AS (
        SELECT r.id, r.status, r.trigger, r.attempt, r.uncounted_attempts, r.status_reason
        FROM runner.job_runs r
        WHERE r.id = ANY(run_ids) AND r.job_name = decide_runs_v1.job_name
          AND r.status = 'awaiting_approval'
        ORDER BY r.id
        FOR UPDATE OF r
    ), changed AS (
        UPDATE runner.job_runs r
        SET status = CASE action WHEN 'approve' THEN 'pending' ELSE 'skipped' END,
            trigger = CASE action WHEN 'approve' THEN 'manual' ELSE r.trigger END,
            -- approved high-risk work runs in the manual lane (revision 0011_lanes)
            lane = CASE action WHEN 'approve' THEN 'manual' ELSE r.lane END,
            next_attempt_at = CASE action WHEN 'approve' THEN clock END,
            uncounted_attempts = CASE action WHEN 'approve' THEN r.attempt ELSE r.uncounted_attempts END,
            finished_at = CASE action WHEN 'approve' THEN NULL ELSE clock END,
            status_reason = left(format('%s by %s: %s', verb, btrim(who), btrim(reason)), 1000),
            updated_at = clock
        FROM target t
        WHERE r.id = t.id AND r.status = t.status
        RETURNING r.id, r.schedule_slot, r.partition_key, t.status AS before_status,
                  t.trigger AS before_trigger, t.attempt AS before_attempt,
                  t.uncounted_attempts AS before_uncounted_attempts, t.status_reason AS before_reason
    )
    SELECT coalesce(jsonb_agg(to_jsonb(c) ORDER BY c.schedule_slot, c.partition_key, c.id), '[]')
    INTO changed_rows
    FROM changed c;

    SELECT coalesce(array_agg(d.id), '{}'),
           coalesce(jsonb_agg(jsonb_build_object(
               'run_id', d.id, 'slot', d.schedule_slot, 'partition_key', d.partition_key,
               'before', jsonb_build_object(
                   'status', d.before_status, 'trigger', d.before_trigger,
                   'attempt', d.before_attempt, 'uncounted_attempts', d.before_uncounted_attempts,
                   'status_reason', d.before_reason),
               'after', CASE action WHEN 'approve'
                            THEN jsonb_build_object('status', 'pending', 'trigger', 'manual')
                            ELSE jsonb_build_object('status', 'skipped') END)
               ORDER BY e.n), '[]')
    INTO done, decided
    FROM jsonb_array_elements(changed_rows) WITH ORDINALITY AS e(v, n)
    CROSS JOIN LATERAL jsonb_to_record(e.v) AS d(
        id bigint, schedule_slot timestamptz, partition_key text, before_status text,
        before_trigger text, before_attempt integer, before_uncounted_attempts integer,
        before_reason text);
    IF cardinality(done) = 0 THEN
        RAISE EXCEPTION 'none of the % run(s) is awaiting approval any more; nothing written',
            coalesce(cardinality(run_ids), 0);
    END IF;

    IF action = 'skip' THEN
        WITH follower AS (
            UPDATE runner.job_runs c
            SET status = 'skipped', finished_at = clock, updated_at = clock,
                status_reason = left(format('skipped with run %s (coalesced into it) by %s: %s',
                                            t.id, btrim(who), btrim(reason)), 1000)
            FROM runner.job_runs t
            WHERE t.id = ANY(done) AND c.job_name = t.job_name AND c.partition_key = t.partition_key
              AND c.coalesced_into_slot = t.schedule_slot AND c.status = 'coalesced'
            RETURNING c.id, c.schedule_slot, c.partition_key, t.id AS cover_run_id
        )
        SELECT coalesce(jsonb_agg(jsonb_build_object(
                   'run_id', f.id, 'slot', f.schedule_slot, 'partition_key', f.partition_key,
                   'cover_run_id', f.cover_run_id,
                   'before', jsonb_build_object('status', 'coalesced'),
                   'after', jsonb_build_object('status', 'skipped'))
                   ORDER BY f.schedule_slot, f.partition_key), '[]')
        INTO followed
        FROM follower f;
    END IF;

    req := runner.operator_request_v1(action, decide_runs_v1.job_name, who, reason, jsonb_build_object(
        'selection', coalesce(selection, '{}'::jsonb),
        'runs', decided,
        'coalesced_runs', followed,
        'left_alone', (SELECT coalesce(jsonb_agg(i ORDER BY n), '[]')
                       FROM unnest(run_ids) WITH ORDINALITY AS u(i, n)
                       WHERE NOT i = ANY(done))));

    RETURN QUERY
    SELECT req, d.id, d.schedule_slot, d.partition_key, d.before_status, d.before_trigger,
           d.before_attempt, d.before_uncounted_attempts, d.before_reason
    FROM jsonb_array_elements(changed_rows) WITH ORDINALITY AS e(v, n)
    CROSS JOIN LATERAL jsonb_to_record(e.v) AS d(
        id bigint, schedule_slot timestamptz, partition_key text, before_status text,
        before_trigger text, before_attempt integer, before_uncounted_attempts integer,
        before_reason text)
    ORDER BY e.n;
END
$$;
REVOKE ALL ON FUNCTION runner.decide_runs_v1(text, text, bigint[], jsonb, text, text, timestamptz) FROM PUBLIC;
