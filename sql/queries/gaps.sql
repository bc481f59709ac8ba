-- Named statements of `runner gaps` (runner/cli.py): the gap scan, runner.missing_slots.

-- name: advance_watermarks
-- Move the gap-scan watermarks first, so that the scan expands only recent slots.
SELECT runner.advance_watermarks_v1() AS advanced

-- name: list_gaps
-- The gap scan at the database's now(), narrowed to one job and to slots at or after `since`
-- inside the scan (cheaper than filtering the view).
SELECT m.job_name, m.schedule_slot, m.local_slot, m.partition_key, m.state, m.run_id,
       m.attempt, m.next_attempt_at, m.heartbeat_at, m.last_error, m.status_reason,
       m.lateness, m.paused
FROM runner.missing_slots_v1(now(), %(job_name)s::text, %(since)s::timestamptz) m
ORDER BY m.schedule_slot, m.job_name, m.partition_key NULLS FIRST
LIMIT %(limit)s
