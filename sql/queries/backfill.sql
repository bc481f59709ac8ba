-- Named statements of backfills (runner/backfill.py): the plan's impact, its creation, the
-- lane's passes (pause, complete, claim under the plan's concurrency and rate), verification,
-- and the operator's list/show/pause/resume/cancel. The expected slot x partitions come in as
-- arrays (the schedule history's slots where the ledger tracks the job: owed_slots; the
-- current definition's before that).

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

-- name: impact_starts
-- The runs a plan over these slot x partitions would queue again (failed, dead, skipped,
-- coalesced, awaiting approval, cancelled; succeeded ones when forced; not a run of another
-- unfinished plan), with their last checkpoints (issue 33): the impact says where each
-- one's next attempt starts. Those with a checkpoint first, then by slot; the first `limit`,
-- each with the count of them all that have a checkpoint.
WITH input AS (
    SELECT DISTINCT t.schedule_slot, t.partition_key
    FROM unnest(%(slots)s::timestamptz[], %(partition_keys)s::text[]) AS t(schedule_slot, partition_key)
), queued AS (
    SELECT r.id, r.schedule_slot, r.partition_key, r.status, r.checkpoint_at, r.checkpoint_fence,
           r.checkpoint_bytes, r.checkpoint_summary
    FROM input i
    JOIN runner.job_runs r
      ON r.job_name = %(job_name)s AND r.schedule_slot = i.schedule_slot
     AND r.partition_key = i.partition_key
    WHERE (r.status IN ('failed', 'dead', 'skipped', 'coalesced', 'awaiting_approval', 'cancelled')
           OR (%(force)s AND r.status = 'succeeded'))
      AND NOT EXISTS (SELECT 1 FROM runner.backfills b
                      WHERE b.replay_group_id = r.replay_group_id
                        AND b.status IN ('planned', 'running', 'paused'))
)
SELECT q.*, count(*) FILTER (WHERE q.checkpoint_at IS NOT NULL) OVER () AS with_checkpoint
FROM queued q
ORDER BY q.checkpoint_at IS NULL, q.schedule_slot, q.partition_key
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

-- name: lane_plans
-- The running plans, for one pass of the lane (which keeps those of the jobs its process
-- defines: filtering here, by an array of every job name, would cost more than the rows).
-- Every tick of every runner runs this: it must stay this cheap. (Their pause conditions
-- are not the lane's: runner/conditions.py.)
SELECT b.id, b.job_name, b.lane
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

-- name: plan_range
-- What a plan whose own runs are all finished still owes its range (runner.plan_range_v1,
-- sql/functions/plan_range_v1.sql): runs of another live plan to wait for, runs of an
-- earlier plan that is over it adopts, and the runs of its range not done.
SELECT f.foreign_unfinished, f.adopted, f.not_done, f.not_done_by_status
FROM runner.plan_range_v1(%(plan_id)s, %(now)s::timestamptz) AS f

-- name: claim_plan_runs
-- The lane's claim for one plan: its queued runs (pending, or failed and due for a retry),
-- oldest slot first, start their next attempt through runner.start_attempts_v1 (the one way
-- to start an attempt), locked on this session like every claim. The plan's token bucket
-- pays for the attempts started. Within the plan's lane's fleet budget too (revision
-- 0011_lanes: runner.lane_budget_v1 under the lane row's lock, paid by runner.lane_spend_v1),
-- so plans and processes of one lane together keep to its concurrency and rate; a lane
-- unknown to runner.lanes starts nothing. A run whose slot is after the database's now is
-- not started (issue 26, defect 1: a plan never runs a slot before its instant).
WITH budget AS MATERIALIZED (
    SELECT b.room, b.tokens, b.at
    FROM runner.lane_budget_v1(ARRAY[%(lane)s]::text[], %(now)s::timestamptz) AS b
), due AS MATERIALIZED (
    SELECT r.id, r.fence
    FROM runner.job_runs r
    WHERE r.replay_group_id = %(replay_group_id)s
      AND r.status IN ('pending', 'failed')
      AND coalesce(r.next_attempt_at, coalesce(%(now)s::timestamptz, now()))
          <= coalesce(%(now)s::timestamptz, now())
      -- never a slot whose instant has not come (runner.start_attempts_v1 refuses it too)
      AND r.schedule_slot <= coalesce(%(now)s::timestamptz, now())
    ORDER BY r.schedule_slot, r.partition_key
    LIMIT coalesce((SELECT least(%(limit)s::int, coalesce(b.room, %(limit)s::int),
                                 coalesce(floor(b.tokens + 1e-9)::int, %(limit)s::int))
                    FROM budget b), 0)
    FOR UPDATE OF r SKIP LOCKED
), claimed AS MATERIALIZED (
    SELECT * FROM runner.start_attempts_v1(
        (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM due),
        (SELECT coalesce(array_agg(fence ORDER BY id), '{}') FROM due),
        false, %(host)s, %(pid)s, %(instance)s, %(namespace)s,
        coalesce(%(now)s::timestamptz, (SELECT at FROM budget)))
), bucket AS (
    UPDATE runner.backfills b
    SET tokens = CASE WHEN %(tokens)s::float8 IS NULL THEN b.tokens
                      ELSE %(tokens)s::float8 - (SELECT count(*) FROM claimed WHERE outcome = 'started') END,
        tokens_at = coalesce(%(now)s::timestamptz, now()),
        updated_at = coalesce(%(now)s::timestamptz, now())
    WHERE b.id = %(plan_id)s
), spent AS MATERIALIZED (
    SELECT runner.lane_spend_v1(ARRAY[%(lane)s]::text[],
                                ARRAY[(SELECT count(*) FROM claimed WHERE outcome = 'started')]::int[],
                                coalesce(%(now)s::timestamptz, (SELECT at FROM budget))) AS lanes
)
SELECT coalesce(%(now)s::timestamptz, now()) AS db_now, k.id, k.job_name, k.schedule_slot,
       k.partition_key, k.business_date, k.window_start, k.window_end, k.trigger, k.attempt,
       k.fence, k.idempotency_key, k.uncounted_attempts, k.locked, k.outcome, %(lane)s::text AS lane
FROM (SELECT 1) AS one
CROSS JOIN spent
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
       b.reason, b.created_at, b.finished_at, b.replay_group_id,
       b.verify_detail -> 'kinds' AS verify_kinds  -- each verification kind's outcome
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

-- name: create_backfill
-- Write the plan, queue its runs and write its request row: runner.create_backfill_v3
-- (sql/functions/create_backfill_v3.sql), which checks what the database can (the arrays,
-- the range, the partitions, the options) and always starts a plan running; `resume` keeps
-- the checkpoints of the runs it queues again (issue 33); `pause_every` paces the plan's
-- pause condition (NULL: the default, 5 s).
SELECT f.backfill_id, f.request_id, f.inserted, f.requeued
FROM runner.create_backfill_v3(
    %(job_name)s, %(range_from)s::timestamptz, %(range_to)s::timestamptz, %(partitions)s::text[],
    %(lane)s, %(concurrency)s, %(rate)s::float8, %(max_failures)s::int, %(pause_when)s::text,
    %(force)s, %(slots)s::timestamptz[], %(partition_keys)s::text[], %(business_dates)s::date[],
    %(window_starts)s::timestamptz[], %(window_ends)s::timestamptz[], %(idempotency_keys)s::text[],
    %(who)s, %(reason)s, %(now)s::timestamptz, %(resume)s, %(pause_every)s::int) AS f

-- name: pause_backfill
-- The operator's actions on a plan (sql/functions/backfill_actions_v1.sql): each checks the
-- transition under the plan's row lock and writes its request row; returns its id.
SELECT runner.pause_backfill_v1(%(plan_id)s, %(who)s, %(reason)s, %(now)s::timestamptz) AS request_id

-- name: resume_backfill
SELECT runner.resume_backfill_v1(%(plan_id)s, %(who)s, %(reason)s, %(max_failures)s::int,
                                 %(set_max_failures)s, %(now)s::timestamptz) AS request_id

-- name: cancel_backfill
SELECT f.request_id, f.runs_cancelled
FROM runner.cancel_backfill_v1(%(plan_id)s, %(who)s, %(reason)s, %(now)s::timestamptz) AS f

-- name: record_backfill_verify
SELECT runner.record_backfill_verify_v1(%(plan_id)s, %(verify_status)s, %(verify_detail)s::jsonb,
                                        %(who)s, %(reason)s, %(now)s::timestamptz) AS request_id

-- name: track_from
-- Where the ledger starts tracking a job (NULL: a job it does not know).
SELECT track_from FROM runner.jobs WHERE job_name = %(job_name)s

-- name: owed_slots
-- The slots a job owes in a backfill's range by its schedule history: runner.expected_slots_v1
-- (the one definition of expected), paused ones included (a backfill catches them up), with
-- the partitions its history row expects there.
SELECT schedule_slot, partitions, dynamic_partitions
FROM runner.expected_slots_v1(%(job_name)s, %(range_from)s::timestamptz, %(range_to)s::timestamptz,
                              %(now)s::timestamptz)
WHERE schedule_slot < %(range_to)s::timestamptz
ORDER BY schedule_slot
