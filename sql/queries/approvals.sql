-- Named statements of `runner approve` and `runner skip` (runner/approvals.py): deciding the
-- runs held as awaiting_approval (misfire=manual, or replay beyond its caps).

-- name: awaiting_runs
-- The held runs of a job in the operator's selection: one slot, a range [from, to), or all;
-- optionally one partition.
SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date, r.status, r.trigger,
       r.attempt, r.fence, r.uncounted_attempts, r.status_reason
FROM runner.job_runs r
WHERE r.job_name = %(job_name)s
  AND r.status = 'awaiting_approval'
  AND (%(slot)s::timestamptz IS NULL OR r.schedule_slot = %(slot)s::timestamptz)
  AND (%(range_from)s::timestamptz IS NULL OR r.schedule_slot >= %(range_from)s::timestamptz)
  AND (%(range_to)s::timestamptz IS NULL OR r.schedule_slot < %(range_to)s::timestamptz)
  AND (%(partition_key)s::text IS NULL OR r.partition_key = %(partition_key)s::text)
ORDER BY r.schedule_slot, r.partition_key
LIMIT %(limit)s

-- name: approve_runs
-- Approved: pending now, trigger manual, with a full budget of attempts (the attempts it had
-- stop counting). Only runs still awaiting approval change; each is returned with its state
-- before.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), target AS (
    SELECT r.id, r.status, r.trigger, r.attempt, r.uncounted_attempts, r.status_reason
    FROM runner.job_runs r
    WHERE r.id = ANY(%(run_ids)s::bigint[]) AND r.status = 'awaiting_approval'
    ORDER BY r.id
    FOR UPDATE OF r
)
UPDATE runner.job_runs r
SET status = 'pending',
    trigger = 'manual',
    next_attempt_at = c.now,
    uncounted_attempts = r.attempt,
    finished_at = NULL,
    status_reason = %(status_reason)s,
    updated_at = c.now
FROM target t, clock c
WHERE r.id = t.id AND r.status = t.status
RETURNING r.id, r.schedule_slot, r.partition_key, t.status AS before_status,
          t.trigger AS before_trigger, t.attempt AS before_attempt,
          t.uncounted_attempts AS before_uncounted_attempts, t.status_reason AS before_reason

-- name: skip_runs
-- Skipped by an operator: final, with the reason. Only runs still awaiting approval change.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), target AS (
    SELECT r.id, r.status, r.trigger, r.attempt, r.uncounted_attempts, r.status_reason
    FROM runner.job_runs r
    WHERE r.id = ANY(%(run_ids)s::bigint[]) AND r.status = 'awaiting_approval'
    ORDER BY r.id
    FOR UPDATE OF r
)
UPDATE runner.job_runs r
SET status = 'skipped',
    next_attempt_at = NULL,
    finished_at = c.now,
    status_reason = %(status_reason)s,
    updated_at = c.now
FROM target t, clock c
WHERE r.id = t.id AND r.status = t.status
RETURNING r.id, r.schedule_slot, r.partition_key, t.status AS before_status,
          t.trigger AS before_trigger, t.attempt AS before_attempt,
          t.uncounted_attempts AS before_uncounted_attempts, t.status_reason AS before_reason
