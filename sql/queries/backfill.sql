-- Named statements of backfills (runner/backfill.py): the plan's impact, its creation, the
-- lane's passes (pause, complete, claim under the plan's concurrency and rate), verification,
-- and the operator's list/show/pause/resume/cancel. The expected slot x partitions come in as
-- arrays (computed by runner/schedule.py from the job's current definition).

-- name: impact
-- What a plan over these slot x partitions would find, by the state of each one's run:
-- 'missing' (no run), the run's status, or 'in_backfill' (its run belongs to another plan
-- that is not finished: left alone).
WITH input AS (
    SELECT *
    FROM unnest(%(slots)s::timestamptz[], %(partition_keys)s::text[]) AS t(schedule_slot, partition_key)
)
SELECT CASE
           WHEN r.id IS NULL THEN 'missing'
           WHEN EXISTS (SELECT 1 FROM runner.backfills b
                        WHERE b.replay_group_id = r.replay_group_id
                          AND b.status IN ('planned', 'running', 'paused')) THEN 'in_backfill'
           ELSE r.status
       END AS state,
       count(*) AS runs
FROM input i
LEFT JOIN runner.job_runs r
       ON r.job_name = %(job_name)s AND r.schedule_slot = i.schedule_slot
      AND r.partition_key = i.partition_key
GROUP BY 1
ORDER BY 1

-- name: impact_running
-- The runs a plan leaves alone because they are in flight (shown to the operator).
WITH input AS (
    SELECT *
    FROM unnest(%(slots)s::timestamptz[], %(partition_keys)s::text[]) AS t(schedule_slot, partition_key)
)
SELECT r.id, r.schedule_slot, r.partition_key, r.attempt, r.fence, r.started_at
FROM input i
JOIN runner.job_runs r
  ON r.job_name = %(job_name)s AND r.schedule_slot = i.schedule_slot
 AND r.partition_key = i.partition_key
WHERE r.status = 'running'
ORDER BY r.schedule_slot, r.partition_key
LIMIT %(limit)s

-- name: impact_effects
-- Effects already recorded (runner.effects, revision 0002) for the runs of these slots, by
-- status: a confirmed effect is never sent again, whatever the backfill does.
WITH input AS (
    SELECT *
    FROM unnest(%(slots)s::timestamptz[], %(partition_keys)s::text[]) AS t(schedule_slot, partition_key)
)
SELECT e.status, count(*) AS effects
FROM input i
JOIN runner.job_runs r
  ON r.job_name = %(job_name)s AND r.schedule_slot = i.schedule_slot
 AND r.partition_key = i.partition_key
JOIN runner.effects e ON e.run_id = r.id
GROUP BY e.status
ORDER BY e.status

-- name: read_only_limits
-- For the operator's pause_when query (runner/conditions.py) and a job's SQL verify check: the current transaction
-- becomes read-only, with a statement timeout (both LOCAL: they end with the transaction,
-- which is always rolled back).
SELECT set_config('transaction_read_only', 'on', true),
       set_config('statement_timeout', %(timeout)s, true)

-- name: time_limit
-- For a job's verify callable: a statement timeout for the rest of the transaction.
SELECT set_config('statement_timeout', %(timeout)s, true)

-- name: insert_plan
INSERT INTO runner.backfills (
    job_name, range_from, range_to, partitions, lane, concurrency, rate, max_failures,
    pause_when, force, status, expected_runs, tokens, tokens_at, requested_by, reason,
    created_at, updated_at)
VALUES (
    %(job_name)s, %(range_from)s, %(range_to)s, %(partitions)s, %(lane)s, %(concurrency)s,
    %(rate)s, %(max_failures)s, %(pause_when)s, %(force)s, 'running', %(expected_runs)s, 1,
    coalesce(%(now)s::timestamptz, now()), %(requested_by)s, %(reason)s,
    coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()))
RETURNING *

-- name: requeue_runs
-- The plan's existing runs that get a new attempt: every status but succeeded (unless
-- force), running and pending, and never a run of another unfinished plan. Each becomes
-- pending (trigger backfill, the plan's group and lane) with a full budget of attempts: its
-- earlier attempts stop counting (uncounted_attempts = attempt). next_attempt_at stays NULL:
-- the backfill lane, not a due time, starts it. Returns each run with its state before.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), input AS (
    SELECT *
    FROM unnest(%(slots)s::timestamptz[], %(partition_keys)s::text[]) AS t(schedule_slot, partition_key)
), target AS (
    SELECT r.id, r.status, r.trigger, r.attempt, r.fence, r.uncounted_attempts, r.last_error
    FROM input i
    JOIN runner.job_runs r
      ON r.job_name = %(job_name)s AND r.schedule_slot = i.schedule_slot
     AND r.partition_key = i.partition_key
    WHERE (r.status IN ('failed', 'dead', 'skipped', 'coalesced', 'awaiting_approval', 'cancelled')
           OR (%(force)s AND r.status = 'succeeded'))
      AND NOT EXISTS (SELECT 1 FROM runner.backfills b
                      WHERE b.replay_group_id = r.replay_group_id
                        AND b.status IN ('planned', 'running', 'paused'))
    ORDER BY r.id
    FOR UPDATE OF r
)
UPDATE runner.job_runs r
SET status = 'pending',
    trigger = 'backfill',
    replay_group_id = %(replay_group_id)s,
    lane = %(lane)s,
    next_attempt_at = NULL,
    uncounted_attempts = r.attempt,
    finished_at = NULL,
    processed_count = 0,
    failed_count = 0,
    coalesced_into_slot = NULL,
    status_reason = %(status_reason)s,
    updated_at = c.now
FROM target t, clock c
WHERE r.id = t.id AND r.status = t.status
RETURNING r.id, r.schedule_slot, r.partition_key, t.status AS before_status,
          t.trigger AS before_trigger, t.attempt AS before_attempt, t.fence AS before_fence,
          t.uncounted_attempts AS before_uncounted_attempts, t.last_error AS before_last_error

-- name: insert_runs
-- The plan's slot x partitions that have no run yet: new runs, pending (trigger backfill).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), input AS (
    SELECT *
    FROM unnest(%(slots)s::timestamptz[], %(partition_keys)s::text[], %(business_dates)s::date[],
                %(window_starts)s::timestamptz[], %(window_ends)s::timestamptz[],
                %(idempotency_keys)s::text[])
         AS t(schedule_slot, partition_key, business_date, window_start, window_end, idempotency_key)
)
INSERT INTO runner.job_runs AS r (
    job_name, schedule_slot, partition_key, business_date, window_start, window_end, status,
    trigger, idempotency_key, replay_group_id, lane, scheduled_at, status_reason, updated_at)
SELECT %(job_name)s, i.schedule_slot, i.partition_key, i.business_date, i.window_start,
       i.window_end, 'pending', 'backfill', i.idempotency_key, %(replay_group_id)s, %(lane)s,
       c.now, %(status_reason)s, c.now
FROM input i CROSS JOIN clock c
ON CONFLICT (job_name, schedule_slot, partition_key) DO NOTHING
RETURNING r.id

-- name: lane_plans
-- The running plans, for one pass of the lane (which keeps those of the jobs its process
-- defines: filtering here, by an array of every job name, would cost more than the rows).
-- Every tick of every runner runs this: it must stay this cheap. (Their pause conditions
-- are not the lane's: runner/conditions.py.)
SELECT b.id, b.job_name
FROM runner.backfills b
WHERE b.status = 'running'
ORDER BY b.id

-- name: try_lock_plan
-- One process at a time works on a plan: a transaction-level advisory lock in the two-int
-- form (lock namespace, plan id), which never collides with the one-bigint keys of runs.
-- Taken with try: a process that does not get it leaves the plan to the holder this pass.
SELECT pg_try_advisory_xact_lock(%(namespace)s::int, %(plan_id)s::int) AS locked

-- name: plan_state
-- The plan (row-locked for this pass) and its group's counts; `tokens` is the bucket now:
-- refilled at `rate` per second since tokens_at, holding at most max(1, rate).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
SELECT b.id, b.job_name, b.replay_group_id, b.status, b.concurrency, b.rate, b.max_failures,
       b.range_from, b.range_to, b.partitions,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.replay_group_id = b.replay_group_id AND r.status = 'running') AS running,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.replay_group_id = b.replay_group_id AND r.status IN ('failed', 'dead')) AS failures,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.replay_group_id = b.replay_group_id
          AND r.status IN ('pending', 'running', 'failed')) AS unfinished,
       CASE WHEN b.rate IS NULL THEN NULL
            ELSE least(greatest(b.rate, 1.0),
                       b.tokens + b.rate * greatest(extract(epoch FROM c.now - b.tokens_at)::float8, 0.0))
       END AS tokens,
       coalesce((SELECT j.paused FROM runner.jobs j WHERE j.job_name = b.job_name), false) AS job_paused
FROM runner.backfills b CROSS JOIN clock c
WHERE b.id = %(plan_id)s
FOR UPDATE OF b

-- name: pause_checked
UPDATE runner.backfills SET pause_checked_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(plan_id)s

-- name: pause_plan
UPDATE runner.backfills
SET status = 'paused', pause_reason = %(reason)s,
    paused_at = coalesce(%(now)s::timestamptz, now()), updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(plan_id)s AND status IN ('planned', 'running')
RETURNING id, status, pause_reason, paused_at

-- name: complete_plan
-- No run of the group is pending, running or failed. verify_status stays NULL until the
-- job's verify check has run (or is not_configured when the job has none).
UPDATE runner.backfills
SET status = 'completed',
    finished_at = coalesce(%(now)s::timestamptz, now()),
    updated_at = coalesce(%(now)s::timestamptz, now()),
    verify_status = CASE WHEN %(verify)s THEN NULL ELSE 'not_configured' END,
    verified_at = CASE WHEN %(verify)s THEN NULL ELSE coalesce(%(now)s::timestamptz, now()) END
WHERE id = %(plan_id)s AND status = 'running'
RETURNING id, status, finished_at, verify_status

-- name: claim_plan_runs
-- The lane's claim for one plan: its queued runs (pending, or failed and due for a retry),
-- oldest slot first, start their next attempt through runner.start_attempts_v1 (the one way
-- to start an attempt), locked on this session like every claim. The plan's token bucket
-- pays for the attempts started.
WITH due AS MATERIALIZED (
    SELECT r.id, r.fence
    FROM runner.job_runs r
    WHERE r.replay_group_id = %(replay_group_id)s
      AND r.status IN ('pending', 'failed')
      AND coalesce(r.next_attempt_at, coalesce(%(now)s::timestamptz, now()))
          <= coalesce(%(now)s::timestamptz, now())
    ORDER BY r.schedule_slot, r.partition_key
    LIMIT %(limit)s
    FOR UPDATE OF r SKIP LOCKED
), claimed AS MATERIALIZED (
    SELECT * FROM runner.start_attempts_v1(
        (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM due),
        (SELECT coalesce(array_agg(fence ORDER BY id), '{}') FROM due),
        false, %(host)s, %(pid)s, %(instance)s, %(namespace)s, %(now)s::timestamptz)
), bucket AS (
    UPDATE runner.backfills b
    SET tokens = CASE WHEN %(tokens)s::float8 IS NULL THEN b.tokens
                      ELSE %(tokens)s::float8 - (SELECT count(*) FROM claimed WHERE outcome = 'started') END,
        tokens_at = coalesce(%(now)s::timestamptz, now()),
        updated_at = coalesce(%(now)s::timestamptz, now())
    WHERE b.id = %(plan_id)s
)
SELECT coalesce(%(now)s::timestamptz, now()) AS db_now, k.id, k.job_name, k.schedule_slot,
       k.partition_key, k.business_date, k.window_start, k.window_end, k.trigger, k.attempt,
       k.fence, k.idempotency_key, k.uncounted_attempts, k.locked, k.outcome
FROM (SELECT 1) AS one
LEFT JOIN claimed k ON true

-- name: group_partitions
SELECT DISTINCT partition_key FROM runner.job_runs
WHERE replay_group_id = %(replay_group_id)s
ORDER BY partition_key

-- name: record_verify
UPDATE runner.backfills
SET verify_status = %(verify_status)s, verify_detail = %(verify_detail)s,
    verified_at = coalesce(%(now)s::timestamptz, now()), updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(plan_id)s
RETURNING id, verify_status, verify_detail, verified_at

-- name: list_plans
SELECT b.id, b.job_name, b.status, b.range_from, b.range_to, b.partitions, b.lane,
       b.concurrency, b.rate, b.max_failures, b.expected_runs, p.succeeded, p.running,
       p.queued, p.failures, p.other, b.pause_reason, b.verify_status, b.requested_by,
       b.reason, b.created_at, b.finished_at, b.replay_group_id
FROM runner.backfills b
CROSS JOIN LATERAL (
    SELECT count(*) FILTER (WHERE r.status = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE r.status = 'running') AS running,
           count(*) FILTER (WHERE r.status = 'pending') AS queued,
           count(*) FILTER (WHERE r.status IN ('failed', 'dead')) AS failures,
           count(*) FILTER (WHERE r.status NOT IN ('succeeded', 'running', 'pending', 'failed', 'dead'))
               AS other
    FROM runner.job_runs r
    WHERE r.replay_group_id = b.replay_group_id
) p
WHERE (%(job_name)s::text IS NULL OR b.job_name = %(job_name)s)
  AND (%(statuses)s::text[] IS NULL OR b.status = ANY(%(statuses)s::text[]))
ORDER BY b.id DESC
LIMIT %(limit)s

-- name: get_plan
SELECT * FROM runner.backfills WHERE id = %(plan_id)s

-- name: lock_plan
SELECT * FROM runner.backfills WHERE id = %(plan_id)s FOR UPDATE

-- name: group_counts
-- A plan's runs by status (its progress).
SELECT r.status, count(*) AS runs
FROM runner.job_runs r
WHERE r.replay_group_id = %(replay_group_id)s
GROUP BY r.status
ORDER BY r.status

-- name: group_failures
-- A plan's failed and dead runs, newest failure first (shown by `runner backfill show`).
SELECT r.id, r.schedule_slot, r.partition_key, r.status, r.attempt, r.last_error, r.updated_at
FROM runner.job_runs r
WHERE r.replay_group_id = %(replay_group_id)s AND r.status IN ('failed', 'dead')
ORDER BY r.updated_at DESC, r.id
LIMIT %(limit)s

-- name: resume_plan
-- Paused -> running. The bucket starts again with one token (no burst after a pause).
UPDATE runner.backfills
SET status = 'running', pause_reason = NULL, paused_at = NULL,
    max_failures = CASE WHEN %(set_max_failures)s THEN %(max_failures)s ELSE max_failures END,
    tokens = 1, tokens_at = coalesce(%(now)s::timestamptz, now()),
    updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(plan_id)s AND status = 'paused'
RETURNING id, status, max_failures

-- name: cancel_plan
UPDATE runner.backfills
SET status = 'cancelled', pause_reason = NULL,
    finished_at = coalesce(%(now)s::timestamptz, now()), updated_at = coalesce(%(now)s::timestamptz, now())
WHERE id = %(plan_id)s AND status IN ('planned', 'running', 'paused')
RETURNING id, status, finished_at

-- name: cancel_plan_runs
-- A cancelled plan's runs that have not started (pending, or failed and waiting for a retry)
-- are cancelled with the reason; runs in flight finish. Returns each with its status before.
WITH target AS (
    SELECT r.id, r.status
    FROM runner.job_runs r
    WHERE r.replay_group_id = %(replay_group_id)s AND r.status IN ('pending', 'failed')
    ORDER BY r.id
    FOR UPDATE OF r
)
UPDATE runner.job_runs r
SET status = 'cancelled',
    next_attempt_at = NULL,
    finished_at = coalesce(%(now)s::timestamptz, now()),
    status_reason = %(status_reason)s,
    updated_at = coalesce(%(now)s::timestamptz, now())
FROM target t
WHERE r.id = t.id AND r.status = t.status
RETURNING r.id, t.status AS before_status
