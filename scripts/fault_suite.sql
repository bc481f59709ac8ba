-- Named statements of the fault suite (scripts/fault_suite.py). The suite's own tables live
-- in the schema "fault", beside the ledger: what the handlers did (executions), what they
-- wrote through ctx.db (sink), and what the fake outside world saw (sends, checks).

-- name: setup
CREATE SCHEMA IF NOT EXISTS fault;
CREATE TABLE IF NOT EXISTS fault.executions (
    run_id bigint NOT NULL, attempt int NOT NULL, fence bigint NOT NULL, pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fault.sink (
    run_id bigint NOT NULL, job_name text NOT NULL, slot timestamptz NOT NULL,
    partition_key text NOT NULL, fence bigint NOT NULL, attempt int NOT NULL,
    part int NOT NULL DEFAULT 2, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fault.sends (
    effect_key text NOT NULL, run_id bigint NOT NULL, attempt int NOT NULL, fence bigint NOT NULL,
    pid int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS fault.checks (
    effect_key text NOT NULL, run_id bigint NOT NULL, attempt int NOT NULL, delivered boolean NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE INDEX IF NOT EXISTS sends_key ON fault.sends (effect_key);
CREATE INDEX IF NOT EXISTS checks_key ON fault.checks (effect_key)

-- name: clock
SELECT clock_timestamp() AS now

-- name: live_instances
SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL AND pid = ANY(%(pids)s::int[])

-- name: first_instance
SELECT min(started_at) FROM runner.instances

-- name: terminate_runner_backends
-- The suite's connection kill: end the given share of the runner's sessions (lock and
-- completer sessions are 'runner', handler pools 'runner-worker'); the fake outside world's
-- connections ('fault-app') are spared.
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS terminated
FROM pg_stat_activity
WHERE datname = current_database()
  AND application_name IN ('runner', 'runner-worker')
  AND pid <> pg_backend_pid()
  AND (%(share)s::float8 >= 1.0 OR abs(hashtext(pid::text || %(salt)s::text)) %% 1000 < %(share)s::float8 * 1000)

-- name: expected_state
-- Every expected slot x partition of the tracked range (computed by runner.schedule and
-- passed in), with its run's status; and the runs at or before the range's end that are not
-- settled yet, expected or not.
WITH expected AS (
    SELECT * FROM unnest(%(job_names)s::text[], %(slots)s::timestamptz[], %(partition_keys)s::text[])
         AS e(job_name, schedule_slot, partition_key)
)
SELECT count(*) AS expected,
       count(*) FILTER (WHERE r.status = 'succeeded') AS succeeded,
       count(*) FILTER (WHERE r.id IS NULL) AS never_claimed,
       (SELECT count(*) FROM runner.job_runs u
        WHERE u.job_name = ANY(%(jobs)s::text[]) AND u.schedule_slot <= %(range_end)s
          AND u.status IN ('running', 'pending', 'failed')) AS unsettled
FROM expected e
LEFT JOIN runner.job_runs r USING (job_name, schedule_slot, partition_key)

-- name: not_succeeded
-- Expected slot x partitions without a succeeded run, by what they have instead.
WITH expected AS (
    SELECT * FROM unnest(%(job_names)s::text[], %(slots)s::timestamptz[], %(partition_keys)s::text[])
         AS e(job_name, schedule_slot, partition_key)
)
SELECT coalesce(r.status, 'never claimed') AS state, count(*) AS n,
       min(e.schedule_slot) AS first_slot, max(e.schedule_slot) AS last_slot
FROM expected e
LEFT JOIN runner.job_runs r USING (job_name, schedule_slot, partition_key)
WHERE r.status IS DISTINCT FROM 'succeeded'
GROUP BY 1
ORDER BY 1

-- name: missing_slots_columns
SELECT count(*) = 3 AS usable
FROM pg_catalog.pg_attribute a
WHERE a.attrelid = to_regclass('runner.missing_slots')
  AND a.attname IN ('job_name', 'schedule_slot', 'partition_key')
  AND a.attnum > 0 AND NOT a.attisdropped

-- name: missing_slots_view
-- The gap scan's own answer over the tracked range.
SELECT count(*) FROM runner.missing_slots m
WHERE m.job_name = ANY(%(jobs)s::text[])
  AND m.schedule_slot > %(range_start)s AND m.schedule_slot <= %(range_end)s

-- name: duplicate_successes
-- Runs with more than one succeeded attempt, and slot x partitions with more than one run
-- (the unique constraint forbids the latter; counted anyway).
SELECT
    (SELECT count(*) FROM (
        SELECT a.run_id FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id
        WHERE r.job_name = ANY(%(jobs)s::text[]) AND a.status = 'succeeded'
        GROUP BY a.run_id HAVING count(*) > 1) d)
  + (SELECT count(*) FROM (
        SELECT 1 FROM runner.job_runs r WHERE r.job_name = ANY(%(jobs)s::text[])
        GROUP BY r.job_name, r.schedule_slot, r.partition_key HAVING count(*) > 1) d)
  + (SELECT count(*) FROM runner.job_runs r
     WHERE r.job_name = ANY(%(jobs)s::text[]) AND r.status = 'succeeded'
       AND NOT EXISTS (SELECT 1 FROM runner.attempts a WHERE a.run_id = r.id AND a.status = 'succeeded'
                       AND a.fence = r.fence)) AS n

-- name: sink_state
-- The ctx.db writes, two rows per run (scripts/fault_app.py): part 1, committed by the run's
-- checkpoint, and part 2, committed with its success. Each part once per succeeded run; no
-- part 2 for a run that did not succeed (a part 1 is the checkpoint's: it stays); part 2
-- written under the run's final fence and part 1 under the fence of the run's checkpoint
-- (any other fence would be a stale owner's write that landed). resumed: runs whose part 2
-- came from a later attempt than their part 1 (resumed from the checkpoint).
WITH per_run AS (
    SELECT r.id, r.status, r.fence,
           count(s.run_id) FILTER (WHERE s.part = 1) AS n1,
           count(s.run_id) FILTER (WHERE s.part = 2) AS n2,
           count(s.run_id) FILTER (WHERE (s.part = 2 AND s.fence <> r.fence)
                                      OR (s.part = 1 AND s.fence IS DISTINCT FROM r.checkpoint_fence)) AS stale,
           max(s.fence) FILTER (WHERE s.part = 2) > min(s.fence) FILTER (WHERE s.part = 1) AS resumed
    FROM runner.job_runs r
    LEFT JOIN fault.sink s ON s.job_name = r.job_name AND s.slot = r.schedule_slot
                          AND s.partition_key = r.partition_key
    WHERE r.job_name = %(job)s
    GROUP BY r.id, r.status, r.fence, r.checkpoint_fence
)
SELECT coalesce(sum(n1 - 1) FILTER (WHERE n1 > 1), 0) + coalesce(sum(n2 - 1) FILTER (WHERE n2 > 1), 0)
           AS duplicate_rows,
       count(*) FILTER (WHERE (n1 = 0 OR n2 = 0) AND status = 'succeeded') AS missing_rows,
       count(*) FILTER (WHERE n2 > 0 AND status <> 'succeeded') AS rows_without_success,
       coalesce(sum(stale), 0) AS stale_rows,
       count(*) FILTER (WHERE resumed) AS resumed_runs,
       (SELECT count(*) FROM fault.sink s
        WHERE NOT EXISTS (SELECT 1 FROM runner.job_runs r WHERE r.id = s.run_id)) AS orphan_rows
FROM per_run

-- name: effect_state
-- Effects of the succeeded runs: each key confirmed once; sends seen by the outside world
-- beyond one per key, and how many of those no check had allowed (a check answered "not
-- delivered" before each allowed repeat).
WITH runs AS (
    SELECT r.idempotency_key || ':notify' AS effect_key, r.status
    FROM runner.job_runs r WHERE r.job_name = ANY(%(jobs)s::text[])
), sends AS (
    SELECT effect_key, count(*) AS n FROM fault.sends GROUP BY effect_key
), said_no AS (
    SELECT effect_key, count(*) FILTER (WHERE NOT delivered) AS n FROM fault.checks GROUP BY effect_key
)
SELECT count(*) FILTER (WHERE runs.status = 'succeeded') AS keys,
       count(*) FILTER (WHERE runs.status = 'succeeded' AND e.status = 'confirmed') AS confirmed,
       count(*) FILTER (WHERE runs.status = 'succeeded' AND e.status IS DISTINCT FROM 'confirmed') AS unconfirmed,
       count(*) FILTER (WHERE runs.status = 'succeeded' AND coalesce(s.n, 0) = 0) AS never_sent,
       coalesce(sum(greatest(s.n - 1, 0)), 0) AS extra_sends,
       coalesce(sum(greatest(s.n - 1 - coalesce(c.n, 0), 0)), 0) AS unexplained_sends,
       coalesce(sum(c.n), 0) AS checks_said_not_delivered,
       count(*) FILTER (WHERE e.confirmed_by = 'check') AS confirmed_by_check,
       (SELECT count(*) FROM fault.sends) AS sends
FROM runs
LEFT JOIN runner.effects e USING (effect_key)
LEFT JOIN sends s USING (effect_key)
LEFT JOIN said_no c USING (effect_key)

-- name: attempt_state
-- Executions beyond one per run (allowed under at-least-once: counted), attempts refused as
-- stale, takeovers, and anything left running once every runner has stopped.
SELECT
    (SELECT coalesce(sum(n - 1), 0) FROM (
        SELECT count(*) AS n FROM fault.executions GROUP BY run_id) x) AS extra_executions,
    (SELECT count(*) FROM fault.executions) AS executions,
    (SELECT count(*) FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id
     WHERE r.job_name = ANY(%(jobs)s::text[])) AS attempts,
    (SELECT count(*) FROM runner.attempts WHERE status = 'stale') AS stale_refused,
    (SELECT count(*) FROM runner.attempts WHERE status = 'abandoned') AS abandoned,
    (SELECT count(*) FROM runner.attempts WHERE status = 'released') AS released,
    (SELECT count(*) FROM runner.attempts WHERE status = 'handed_off') AS handed_off,
    (SELECT count(*) FROM runner.attempts WHERE status IN ('failed', 'timed_out')) AS failed_attempts,
    (SELECT count(*) FROM runner.job_runs WHERE status = 'running') AS runs_left_running,
    (SELECT count(*) FROM runner.attempts WHERE status = 'running') AS attempts_left_running,
    (SELECT count(*) FROM runner.job_runs WHERE status = 'dead') AS dead_runs

-- name: recovery_latency
-- From each kill -9 to the start of the next attempt of every run the killed process owned.
WITH kills AS (
    SELECT * FROM unnest(%(pids)s::int[], %(killed_at)s::timestamptz[]) AS k(pid, killed_at)
), owned AS (
    SELECT k.killed_at, a.run_id, a.fence
    FROM kills k
    JOIN runner.attempts a ON a.owner_pid = k.pid AND a.started_at <= k.killed_at
                          AND a.status = 'abandoned'
)
SELECT extract(epoch FROM n.started_at - o.killed_at)::float8 AS seconds
FROM owned o
JOIN LATERAL (
    SELECT b.started_at FROM runner.attempts b
    WHERE b.run_id = o.run_id AND b.fence > o.fence
    ORDER BY b.fence LIMIT 1
) n ON true
ORDER BY 1

-- name: leaked_locks
-- Advisory locks still held for runs that finished more than two seconds ago: each should
-- have been released right after its outcome was recorded. A leaked lock makes every later
-- attempt of its run fail with runner.LockUnavailable until the holding session ends.
SELECT r.id AS run_id, r.status, l.pid AS holder, r.finished_at, r.updated_at
FROM runner.job_runs r
JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
     AND l.classid = ((runner.lock_key_v1(%(namespace)s, r.id) >> 32) & 4294967295)::oid
     AND l.objid = (runner.lock_key_v1(%(namespace)s, r.id) & 4294967295)::oid
WHERE r.job_name = ANY(%(jobs)s::text[]) AND r.status <> 'running'
  AND r.updated_at < clock_timestamp() - interval '2 seconds'
ORDER BY r.id

-- name: failures_by_class
-- Attempts that did not succeed, by error class (faults show up here as causes).
SELECT coalesce(a.error_class, a.status) AS cause, count(*) AS n
FROM runner.attempts a JOIN runner.job_runs r ON r.id = a.run_id
WHERE r.job_name = ANY(%(jobs)s::text[]) AND a.status NOT IN ('succeeded', 'running')
GROUP BY 1
ORDER BY 2 DESC, 1
