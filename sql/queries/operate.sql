-- Named statements of the operator commands (runner/operate.py): status, rerun, pause and
-- resume. Every change an operator makes is one call of its action function (revision
-- 0007_security), which writes the change and its runner.requests row together.

-- name: job_health
-- runner.job_health for every job, or one (runner.job_health_v1: the view's body, one job read
-- by its key), with each job's count of gap-scan rows from the same pass of the scan
-- (revision 0016_health: before, a second statement ran the scan again to count them).
SELECT h.job_name, h.owner, h.paused, h.last_success_at, h.last_success_slot,
       h.last_success_business_date, h.last_success_run_id, h.last_slot, h.last_slot_statuses,
       h.last_processed, h.last_failed, h.succeeded_24h, h.failed_24h, h.dead_24h,
       h.oldest_unfinished_slot, h.lag, h.retired_at, h.missing, h.backfill_open,
       h.backfill_oldest_slot, h.catch_up_open,
       -- the schedule the ledger holds (the last synced definition): the next slot without --app
       j.schedule_kind, j.cron, j.every_interval, j.timezone
FROM runner.job_health_v1(%(job_name)s::text) h
LEFT JOIN runner.jobs j ON j.job_name = h.job_name
ORDER BY h.job_name

-- name: alerts
SELECT a.kind, a.job_name, a.owner, a.run_id, a.detail, a.since
FROM runner.alerts a
WHERE (%(job_name)s::text IS NULL OR a.job_name = %(job_name)s)
ORDER BY a.since DESC NULLS LAST, a.kind, a.job_name, a.run_id

-- name: backfill_plans
-- The plans `runner status` shows (runner.backfill_plans, revision 0013_verify): those not
-- finished, and those finished in the last 24 hours, newest first.
SELECT p.id, p.job_name, p.status, p.expected_runs, p.done, p.remaining, p.failures,
       p.pause_reason, p.pause_cause, p.pauses, p.verify_status, p.verify_min_passing,
       p.verify_passing, p.verify_kinds, p.finished_at
FROM runner.backfill_plans p
WHERE (%(job_name)s::text IS NULL OR p.job_name = %(job_name)s)
  AND (p.status IN ('planned', 'running', 'paused') OR p.finished_at > runner.ledger_now_v1() - interval '24 hours')
ORDER BY p.id DESC
LIMIT 50

-- name: has_column
-- Whether a relation exists and has a column: the operator commands use relations of other
-- revisions (runner.missing_slots, runner.effects) only where they exist.
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_attribute a
    WHERE a.attrelid = to_regclass(%(relation)s) AND a.attname = %(column)s
      AND a.attnum > 0 AND NOT a.attisdropped
) AS present

-- name: find_run
SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date, r.status,
       r.trigger, r.attempt, r.fence, r.uncounted_attempts, r.next_attempt_at, r.started_at,
       r.finished_at, r.processed_count, r.failed_count, r.last_error, r.status_reason,
       coalesce(j.paused, false) AS job_paused,
       -- its last checkpoint (issue 33): a rerun clears it unless asked to resume from it
       r.checkpoint_at, r.checkpoint_fence, r.checkpoint_bytes, r.checkpoint_summary
FROM runner.job_runs r
LEFT JOIN runner.jobs j ON j.job_name = r.job_name
WHERE r.job_name = %(job_name)s AND r.schedule_slot = %(slot)s
  AND r.partition_key = %(partition_key)s

-- name: slot_partitions
-- The partitions that do have a run at a slot (to help an operator who gave the wrong one).
SELECT r.partition_key
FROM runner.job_runs r
WHERE r.job_name = %(job_name)s AND r.schedule_slot = %(slot)s
ORDER BY r.partition_key
LIMIT 11

-- name: run_attempts
-- traceback and last_heartbeat (revision 0008_watch): a failed attempt's redacted, bounded
-- traceback and the handler's last ctx.heartbeat() (the run page, `runner runs --show ID`)
SELECT a.attempt, a.fence, a.trigger, a.status, a.owner_host, a.owner_pid, a.started_at,
       a.finished_at, a.heartbeat_at, a.error_class, a.error_message, a.traceback, a.last_heartbeat
FROM runner.attempts a
WHERE a.run_id = %(run_id)s
ORDER BY a.fence

-- name: run_effects
-- Whatever columns runner.effects has (revision 0002), as one json object per effect.
SELECT to_jsonb(e) AS effect
FROM runner.effects e
WHERE e.run_id = %(run_id)s
ORDER BY e.id

-- name: rerun
-- Queue the run for a new attempt now, triggered 'manual', with its request row:
-- runner.rerun_v2 (sql/functions/rerun_v2.sql) checks, under the run's row lock, that it is
-- still as the operator was shown (status and fence) and may be rerun. The attempts it had
-- so far stop counting against max_attempts, so even a dead run gets a full budget again.
SELECT f.request_id, f.id, f.status, f.trigger, f.attempt, f.fence, f.uncounted_attempts,
       f.next_attempt_at
FROM runner.rerun_v2(%(run_id)s, %(seen_status)s, %(seen_fence)s, %(force)s, %(who)s, %(reason)s,
                     %(now)s::timestamptz, %(resume)s) AS f

-- name: job_state
SELECT j.job_name, j.paused, j.options ->> 'owner' AS owner,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.job_name = j.job_name AND r.status = 'running') AS running,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.job_name = j.job_name AND r.status IN ('pending', 'failed')) AS queued
FROM runner.jobs j
WHERE j.job_name = %(job_name)s

-- name: set_paused
-- Pause or resume, with its request row (runner.set_job_paused_v1); no row when the job
-- already was in that state.
SELECT f.request_id, f.job, f.now_paused
FROM runner.set_job_paused_v1(%(job_name)s, %(paused)s, %(who)s, %(reason)s) AS f

-- name: get_request
SELECT id, action, job_name, who, reason, requested_at, db_user, touched
FROM runner.requests
WHERE id = %(request_id)s

-- name: retire_state
-- What retiring or unretiring a job would touch: its state, its runs in flight and queued,
-- and whether a live runner (fresh heartbeat) still has it in its code.
SELECT j.job_name, j.retired_at, j.paused, j.options ->> 'owner' AS owner,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.job_name = j.job_name AND r.status = 'running') AS running,
       (SELECT count(*) FROM runner.job_runs r
        WHERE r.job_name = j.job_name AND r.status IN ('pending', 'failed')) AS queued,
       (SELECT count(*) FROM runner.instances i
        WHERE i.stopped_at IS NULL AND i.heartbeat_at > (SELECT runner.ledger_now_v1()) - interval '15 seconds'
          AND i.jobs @> ARRAY[j.job_name]) AS live_runners
FROM runner.jobs j
WHERE j.job_name = %(job_name)s

-- name: retire
-- runner.retire_job_v1 (sql/functions/retire_job_v1.sql); no row when already retired.
SELECT f.request_id, f.job, f.retired_at
FROM runner.retire_job_v1(%(job_name)s, %(who)s, %(reason)s) AS f

-- name: unretire
-- runner.unretire_job_v1; no row when the job is not retired.
SELECT f.request_id, f.job, f.retired_at
FROM runner.unretire_job_v1(%(job_name)s, %(who)s, %(reason)s) AS f

-- name: liveness
-- `runner status`'s runners line and the console's banner on every page: how many runner
-- processes are live (not stopped, heartbeat within 15 s, as runner.alerts counts them) and
-- the newest heartbeat of any (NULL: no runner ever registered). One pass over
-- runner.instances, which retention keeps small.
SELECT count(*) FILTER (WHERE i.stopped_at IS NULL AND i.heartbeat_at > (SELECT runner.ledger_now_v1()) - interval '15 seconds')
           AS live,
       max(i.heartbeat_at) AS last_beat,
       (SELECT runner.ledger_now_v1()) - max(i.heartbeat_at) AS since_beat
FROM runner.instances i
