-- Named statements of bulk recovery (runner/bulk.py): `runner rerun-many` and the console's
-- action rerun_many. Reads only here; the write is runner.rerun_runs_v1.

-- name: plan_of
-- A backfill plan's job and replay group (a bulk rerun of a backfill's failures).
SELECT b.id, b.job_name, b.replay_group_id, b.status, b.range_from, b.range_to
FROM runner.backfills b
WHERE b.id = %(plan_id)s

-- name: job_exists
SELECT j.job_name FROM runner.jobs j WHERE j.job_name = %(job_name)s

-- name: candidates
-- The job's failed or dead runs (of the statuses asked) in [from, to), of one partition when
-- given, of one replay group (a backfill's) when given; oldest slot first, one more than the
-- cap (the caller refuses beyond it). The job's index of runs needing attention
-- (job_runs_unaccounted: job_name, schedule_slot) serves it, or the replay group's.
SELECT r.id, r.schedule_slot, r.partition_key, r.status, r.fence, r.attempt, r.trigger, r.lane,
       r.finished_at, r.last_error, r.replay_group_id, r.checkpoint_at, r.checkpoint_bytes,
       r.checkpoint_summary
FROM runner.job_runs r
WHERE r.job_name = %(job_name)s
  AND r.status = ANY (%(statuses)s::text[])
  AND r.status IN ('failed', 'dead')
  AND (%(from)s::timestamptz IS NULL OR r.schedule_slot >= %(from)s)
  AND (%(to)s::timestamptz IS NULL OR r.schedule_slot < %(to)s)
  AND (%(partition)s::text IS NULL OR r.partition_key = %(partition)s)
  AND (%(replay_group_id)s::uuid IS NULL OR r.replay_group_id = %(replay_group_id)s)
ORDER BY r.schedule_slot, r.partition_key
LIMIT %(limit)s

-- name: rerun_runs
-- runner.rerun_runs_v1 (sql/functions/rerun_runs_v1.sql): under the runs' row locks each must
-- still be as shown and failed or dead; one request row, or nothing written.
SELECT request_id, id, status, trigger, attempt, fence, uncounted_attempts, next_attempt_at
FROM runner.rerun_runs_v1(%(job_name)s, %(run_ids)s, %(seen_statuses)s, %(seen_fences)s,
                          %(selection)s, %(who)s, %(reason)s, %(now)s)
