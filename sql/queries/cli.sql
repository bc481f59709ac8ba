-- Named statements of the operator commands (runner/cli.py).

-- name: list_runs
SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date, r.window_start,
       r.window_end, r.status, r.trigger, r.attempt, r.fence, r.idempotency_key,
       r.replay_group_id, r.scheduled_at, r.next_attempt_at, r.started_at, r.finished_at,
       r.processed_count, r.failed_count, r.last_error, r.status_reason,
       d.tier AS misfire_tier,  -- the misfire tier that decided it (runner.misfire_decisions)
       -- the last checkpoint (issue 33): when, its size, its summary; the state itself only
       -- with --show
       r.checkpoints, r.checkpoint_at, r.checkpoint_bytes, r.checkpoint_summary
FROM runner.job_runs r
LEFT JOIN runner.misfire_decisions d ON d.run_id = r.id
WHERE (%(job_name)s::text IS NULL OR r.job_name = %(job_name)s)
  AND (%(run_id)s::bigint IS NULL OR r.id = %(run_id)s)
  AND (%(statuses)s::text[] IS NULL OR r.status = ANY(%(statuses)s::text[]))
  AND (%(partition_key)s::text IS NULL OR r.partition_key = %(partition_key)s)
  AND (%(since)s::timestamptz IS NULL OR r.schedule_slot >= %(since)s)
  AND (%(until)s::timestamptz IS NULL OR r.schedule_slot < %(until)s)
ORDER BY r.schedule_slot DESC, r.job_name, r.partition_key
LIMIT %(limit)s

-- name: show_run
-- One run by id (`runner runs --show ID`; its attempts: operate.sql run_attempts).
SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date, r.window_start,
       r.window_end, r.status, r.trigger, r.attempt, r.fence, r.started_at, r.finished_at,
       r.processed_count, r.failed_count, r.last_error, r.status_reason,
       -- its last checkpoint (issue 33): when, size, summary, the state itself
       r.checkpoints, r.checkpoint_at, r.checkpoint_bytes, r.checkpoint_summary, r.checkpoint
FROM runner.job_runs r
WHERE r.id = %(run_id)s
