-- runner.start_attempts_v1: the one way an existing run starts a new attempt.
--
-- Every path that gives a run its next attempt calls it: the loop's retries and queued runs
-- (claim_due_runs: reruns, approvals, released runs, catch-up runs), the backfill lane
-- (claim_plan_runs) and the takeover of runs whose owner is gone (take_over_orphans). Only
-- the first attempt of a brand-new run is made elsewhere (claim_slots, with its INSERT).
--
-- For each given run (id, and the fence the caller saw), in id order, under the run's row
-- lock, re-checking what the caller saw:
--   * recovery = false: the run must still be pending or failed (and at that fence when one
--     is given). Trigger becomes retry for a failed run, else stays (manual, backfill,
--     catch_up, recovery for a released run).
--   * recovery = true: the run must still be running at that fence, and this session must
--     get its advisory lock now (the owner's session is gone; a row locked by someone else,
--     e.g. a completer recording its outcome, is skipped this time). Trigger becomes
--     recovery; the previous attempt is closed as abandoned.
-- A new attempt (recovery = false) of a run whose slot is after the clock (as_of, else the
-- database's now) is not started: no attempt ever starts before its slot's instant (issue
-- 26; runner check reports started_before_slot). Then max_attempts applies, whatever the kind of attempt: a run whose counted attempts
-- (attempt - uncounted_attempts: attempts released at shutdown and those before a manual
-- rerun do not count) already reach its job's max_attempts goes dead with the reason,
-- instead of starting another attempt. Otherwise: running, attempt + 1, fence + 1, an
-- attempt row owned by the caller, and (recovery = false) the run's session advisory lock
-- taken on this session (locked = false when another session holds the key: the caller
-- records that attempt as failed, and it counts).
--
-- The new attempt row records the run's checkpoint count as it took the fence
-- (checkpoints_before, revision 0009_checkpoints): runner check's checkpoint_not_owned.
-- Returns one row per run it changed: outcome 'started' (with the run's new attempt) or
-- 'dead' (no attempt started; for recovery = true this session holds the run's lock and
-- must release it). Runs that no longer match what the caller saw are left alone.
--
-- Privileges: it runs as its owner (SECURITY DEFINER, fixed search_path), so that the worker
-- role needs no UPDATE of a run's status, attempt or fence, nor of an attempt's status
-- (revision 0007_security): the rules above are what lets a fence move. The advisory locks
-- it takes are the calling session's, as before. EXECUTE is revoked from PUBLIC; sql/roles.sql
-- grants it to the worker role.
CREATE OR REPLACE FUNCTION runner.start_attempts_v1(
    run_ids bigint[], fences bigint[], recovery boolean, owner_host text, owner_pid integer,
    owner_instance uuid, namespace integer, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (
    id bigint, job_name text, schedule_slot timestamptz, partition_key text, business_date date,
    window_start timestamptz, window_end timestamptz, trigger text, attempt integer,
    fence bigint, idempotency_key text, uncounted_attempts integer, started_at timestamptz,
    locked boolean, outcome text)
LANGUAGE sql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
WITH clock AS (
    SELECT coalesce(as_of, now()) AS now
), input AS (
    SELECT t.id, t.fence FROM unnest(run_ids, fences) AS t(id, fence)
), seen AS MATERIALIZED (
    SELECT r.id, r.fence
    FROM runner.job_runs r
    JOIN input i ON i.id = r.id
    CROSS JOIN clock c
    WHERE (i.fence IS NULL OR r.fence = i.fence)
      AND CASE WHEN recovery THEN r.status = 'running' ELSE r.status IN ('pending', 'failed') END
      -- never before the slot's instant (a run queued for a slot not yet due waits for it)
      AND (recovery OR r.schedule_slot <= c.now)
    ORDER BY r.id
    FOR UPDATE OF r SKIP LOCKED
), mine AS MATERIALIZED (
    -- a recovery needs the run's lock now; a new attempt of a queued run locks after starting
    SELECT s.id, s.fence FROM seen s
    WHERE NOT recovery OR pg_try_advisory_lock(runner.lock_key_v1(namespace, s.id))
), budget AS MATERIALIZED (
    -- (a run whose job is not in runner.jobs has no known budget: it is not limited here)
    SELECT m.id, m.fence, r.attempt - r.uncounted_attempts AS counted,
           coalesce(j.max_attempts, 2147483647) AS max_attempts
    FROM mine m
    JOIN runner.job_runs r ON r.id = m.id
    LEFT JOIN runner.jobs j ON j.job_name = r.job_name
), started AS (
    UPDATE runner.job_runs r
    SET status = 'running',
        trigger = CASE WHEN recovery THEN 'recovery'
                       WHEN r.status = 'failed' THEN 'retry'
                       ELSE r.trigger END,
        attempt = r.attempt + 1,
        fence = r.fence + 1,
        started_at = c.now,
        next_attempt_at = NULL,
        updated_at = c.now
    FROM budget b, clock c
    WHERE r.id = b.id AND b.counted < b.max_attempts
    RETURNING r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date,
              r.window_start, r.window_end, r.trigger, r.attempt, r.fence, r.idempotency_key,
              r.uncounted_attempts, r.started_at, r.checkpoints
), exhausted AS (
    UPDATE runner.job_runs r
    SET status = 'dead',
        fence = r.fence + 1,
        finished_at = c.now,
        next_attempt_at = NULL,
        last_error = CASE WHEN recovery
            THEN 'runner.OwnerLost: the owner''s lock session ended before it recorded an outcome; '
            ELSE '' END
            || b.counted || ' of max_attempts=' || b.max_attempts || ' attempts counted, no attempt left'
            || CASE WHEN recovery THEN ' (a handler that ends its process?)' ELSE '' END,
        updated_at = c.now
    FROM budget b, clock c
    WHERE r.id = b.id AND b.counted >= b.max_attempts
    RETURNING r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date,
              r.window_start, r.window_end, r.trigger, r.attempt, r.fence, r.idempotency_key,
              r.uncounted_attempts, r.started_at
), abandoned AS (
    UPDATE runner.attempts a
    SET status = 'abandoned',
        finished_at = c.now,
        error_class = 'runner.OwnerLost',
        error_message = 'the owner''s lock session ended before it recorded an outcome'
    FROM budget b, clock c
    WHERE recovery AND a.run_id = b.id AND a.fence = b.fence AND a.status = 'running'
), attempt AS (
    INSERT INTO runner.attempts (
        run_id, attempt, fence, trigger, owner_host, owner_pid, owner_instance, lock_key,
        owner_backend_pid, started_at, heartbeat_at, checkpoints_before)
    SELECT s.id, s.attempt, s.fence, s.trigger, owner_host, owner_pid, owner_instance,
           runner.lock_key_v1(namespace, s.id), pg_backend_pid(), s.started_at, s.started_at,
           s.checkpoints
    FROM started s
)
SELECT s.id, s.job_name, s.schedule_slot, s.partition_key, s.business_date, s.window_start,
       s.window_end, s.trigger, s.attempt, s.fence, s.idempotency_key, s.uncounted_attempts,
       s.started_at,
       CASE WHEN recovery THEN true
            ELSE pg_try_advisory_lock(runner.lock_key_v1(namespace, s.id)) END,
       'started'
FROM started s
UNION ALL
SELECT x.id, x.job_name, x.schedule_slot, x.partition_key, x.business_date, x.window_start,
       x.window_end, x.trigger, x.attempt, x.fence, x.idempotency_key, x.uncounted_attempts,
       x.started_at, recovery, 'dead'
FROM exhausted x
$$;
REVOKE ALL ON FUNCTION runner.start_attempts_v1(bigint[], bigint[], boolean, text, integer, uuid, integer, timestamptz) FROM PUBLIC;
