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

-- name: decide_runs
-- Approve (pending now, trigger manual, a full budget of attempts) or skip (skipped, with the
-- reason) the given runs that still await approval, with one request row:
-- runner.decide_runs_v1 (sql/functions/decide_runs_v1.sql). Each changed run comes back with
-- its state before.
SELECT f.request_id, f.id, f.schedule_slot, f.partition_key, f.before_status, f.before_trigger,
       f.before_attempt, f.before_uncounted_attempts, f.before_reason
FROM runner.decide_runs_v1(%(action)s, %(job_name)s, %(run_ids)s::bigint[], %(selection)s::jsonb,
                           %(who)s, %(reason)s, %(now)s::timestamptz) AS f
