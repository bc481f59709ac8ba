-- Statements of runner/testing.py (run_once: one job, one slot, through the real claim,
-- attempt and outcome path) that the loop has no need of.

-- name: run_of_slot
-- The run of one job x slot x partition, if any.
SELECT id, fence, status
FROM runner.job_runs
WHERE job_name = %(job_name)s AND schedule_slot = %(slot)s AND partition_key = %(partition_key)s

-- name: start_run_attempt
-- The next attempt of one pending or failed run, now, whatever its next_attempt_at: through
-- runner.start_attempts_v1, the one way an existing run starts an attempt (max_attempts
-- applies: a run out of attempts goes dead instead). Rows shaped as claim_due_runs's.
SELECT now() AS db_now, k.id, k.job_name, k.schedule_slot, k.partition_key, k.business_date,
       k.window_start, k.window_end, k.trigger, k.attempt, k.fence, k.idempotency_key,
       k.uncounted_attempts, k.locked, k.outcome
FROM (SELECT 1) AS one
LEFT JOIN runner.start_attempts_v1(
    ARRAY[%(run_id)s::bigint], ARRAY[%(fence)s::bigint], false, %(host)s, %(pid)s, %(instance)s,
    %(namespace)s) AS k ON true

-- name: run_record
-- One run as recorded.
SELECT id, job_name, schedule_slot, partition_key, status, trigger, attempt, fence,
       idempotency_key, last_error, status_reason, processed_count, failed_count,
       next_attempt_at, started_at, finished_at
FROM runner.job_runs
WHERE id = %(run_id)s

-- name: run_attempts
-- Its attempts, oldest first.
SELECT attempt, fence, trigger, status, error_class, error_message, started_at, finished_at,
       traceback
FROM runner.attempts
WHERE run_id = %(run_id)s
ORDER BY attempt, fence
