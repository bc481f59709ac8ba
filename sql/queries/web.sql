-- Named statements of the operator console (runner/web/). Reads only, from the views and
-- tables the CLI reads; every action goes through the modules the CLI calls (operate,
-- approvals, backfill), so through the same action functions. Each read is bounded (a
-- LIMIT, a time window on an indexed column): no page costs more as the ledger ages.

-- name: job_slot_stats
-- The job's slots in the window (one pass over its runs there, on the (job, slot) index):
-- per slot and status, the runs, the longest run and the latest start after the slot, in
-- seconds. The grid's columns, its counts per slot, and the duration/lag chart.
SELECT r.schedule_slot, r.status, count(*) AS runs,
       max(extract(epoch FROM r.finished_at - r.started_at))::float8 AS duration_s,
       max(extract(epoch FROM r.started_at - r.schedule_slot))::float8 AS start_lag_s
FROM runner.job_runs r
WHERE r.job_name = %(job_name)s AND r.schedule_slot >= %(since)s AND r.schedule_slot <= %(until)s
GROUP BY r.schedule_slot, r.status

-- name: job_slot_partitions
-- The partitions of the job's newest slots (one more than the grid shows one by one: beyond
-- that, the grid shows counts per slot).
SELECT DISTINCT r.partition_key
FROM runner.job_runs r
WHERE r.job_name = %(job_name)s AND r.schedule_slot = ANY(%(slots)s::timestamptz[])
ORDER BY r.partition_key
LIMIT %(limit)s

-- name: job_cells
-- One cell per run of those slots: its partition and status.
SELECT r.id, r.schedule_slot, r.partition_key, r.status
FROM runner.job_runs r
WHERE r.job_name = %(job_name)s AND r.schedule_slot = ANY(%(slots)s::timestamptz[])

-- name: job_missing
-- The job's expected slots in the window that no run accounts for and that have no run at
-- all (the gap scan's never_started and fanout_failed), newest first. The scan is judged as of
-- a day after the window's end (now at the latest): an older window, paged back to, costs its
-- 7 days and not every slot from it up to now.
SELECT m.schedule_slot, m.partition_key, m.state, m.last_error
FROM runner.missing_slots_v1(least(runner.ledger_now_v1(), %(until)s::timestamptz + interval '1 day'),
                             %(job_name)s::text, %(since)s::timestamptz) m
WHERE m.state IN ('never_started', 'fanout_failed') AND m.schedule_slot <= %(until)s
ORDER BY m.schedule_slot DESC
LIMIT %(limit)s

-- name: job_runs
-- The job's newest runs (the job page's table).
SELECT r.id, r.schedule_slot, r.partition_key, r.business_date, r.status, r.trigger,
       r.attempt, r.started_at, r.finished_at, r.processed_count, r.failed_count, r.last_error
FROM runner.job_runs r
WHERE r.job_name = %(job_name)s
  AND (%(status)s::text IS NULL OR r.status = %(status)s)
ORDER BY r.schedule_slot DESC, r.partition_key
LIMIT %(limit)s

-- name: job_awaiting
SELECT count(*) AS runs
FROM runner.job_runs r
WHERE r.job_name = %(job_name)s AND r.status = 'awaiting_approval'

-- name: get_run
SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date, r.window_start,
       r.window_end, r.status, r.trigger, r.attempt, r.fence, r.uncounted_attempts,
       r.idempotency_key, r.replay_group_id, r.scheduled_at, r.next_attempt_at, r.started_at,
       r.finished_at, r.processed_count, r.failed_count, r.last_error, r.status_reason,
       -- the last checkpoint (issue 33): when, by which fence, its size, its summary, and the
       -- start of its state (at most 64 KiB; the page shows 500 characters)
       r.checkpoints, r.checkpoint_at, r.checkpoint_fence, r.checkpoint_bytes, r.checkpoint_summary,
       left(r.checkpoint::text, 500) AS checkpoint_head
FROM runner.job_runs r
WHERE r.id = %(run_id)s

-- name: run_requests
-- The requests that touched a run (each action function lists its runs in touched.runs).
SELECT q.id, q.action, q.job_name, q.who, q.reason, q.requested_at, q.db_user, q.touched
FROM runner.requests q
WHERE q.job_name = %(job_name)s
  AND q.touched -> 'runs' @> jsonb_build_array(jsonb_build_object('run_id', %(run_id)s::bigint))
ORDER BY q.requested_at DESC, q.id DESC
LIMIT %(limit)s

-- name: gaps
-- The gap scan at the ledger's now (runner.ledger_now_v1(): a replica's last replayed commit), narrowed to a job, states and a time range.
SELECT m.job_name, m.schedule_slot, m.local_slot, m.partition_key, m.state, m.run_id,
       m.attempt, m.next_attempt_at, m.heartbeat_at, m.last_error, m.status_reason,
       m.lateness, m.paused
FROM runner.missing_slots_v1(runner.ledger_now_v1(), %(job_name)s::text, %(since)s::timestamptz) m
WHERE (%(states)s::text[] IS NULL OR m.state = ANY(%(states)s::text[]))
  AND (%(until)s::timestamptz IS NULL OR m.schedule_slot < %(until)s)
ORDER BY m.schedule_slot DESC, m.job_name, m.partition_key NULLS FIRST
LIMIT %(limit)s

-- name: requests
-- The audit log, newest first; before_id pages back.
SELECT q.id, q.action, q.job_name, q.who, q.reason, q.requested_at, q.db_user, q.touched
FROM runner.requests q
WHERE (%(job_name)s::text IS NULL OR q.job_name = %(job_name)s)
  AND (%(before_id)s::bigint IS NULL OR q.id < %(before_id)s)
ORDER BY q.id DESC
LIMIT %(limit)s

-- name: login_role
-- Who the console's action connection is (shown on the Jobs page, never the password).
SELECT current_user AS role, current_database() AS database

-- name: alerts
-- runner.alerts (what `runner status` lists), newest first, bounded: the page shows the
-- first `limit` (one more tells that there are more).
SELECT a.kind, a.job_name, a.owner, a.run_id, a.detail, a.since
FROM runner.alerts a
WHERE (%(job_name)s::text IS NULL OR a.job_name = %(job_name)s)
ORDER BY a.since DESC NULLS LAST, a.kind, a.job_name, a.run_id
LIMIT %(limit)s

-- name: alert_counts
-- How many rows of runner.alerts each job has (the Jobs page's column; NULL job_name: alerts
-- of no job, e.g. a lock squatter on a run that does not exist).
SELECT a.job_name, count(*) AS alerts
FROM runner.alerts a
GROUP BY a.job_name

-- name: session_ended
-- Whether a console session was ended (logged out) by any console on this ledger
-- (runner.web_sessions_ended, revision 0006_websessions; key: its id's SHA-256).
SELECT EXISTS (SELECT 1 FROM runner.web_sessions_ended e WHERE e.session_hash = %(session_hash)s) AS ended

-- name: end_session
-- Logging out: the session is refused by every console from now on.
SELECT runner.end_web_session_v1(%(session_hash)s, %(user_name)s, to_timestamp(%(expires)s)) AS added

-- name: runners
-- The Runners page: every runner process the ledger knows (runner.instances, newest beat
-- first; retention prunes the long stopped ones), live (not stopped, heartbeat within 15 s, as
-- the alerts count them) or not, with its runs in flight (attempts running under it, on the
-- attempts_running index) and whether its lock session is connected (as the database these
-- pages read sees it: on a replica, always false).
SELECT i.instance_id, i.host, i.pid, i.runner_version, i.lanes, i.started_at, i.heartbeat_at,
       i.stopped_at, i.backend_pid, i.lock_namespace, coalesce(cardinality(i.jobs), 0) AS jobs,
       (i.stopped_at IS NULL AND i.heartbeat_at > (SELECT runner.ledger_now_v1()) - interval '15 seconds') AS live,
       now() - i.heartbeat_at AS beat_age,
       EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = i.backend_pid) AS session_connected,
       (SELECT count(*) FROM runner.attempts a
        WHERE a.owner_instance = i.instance_id AND a.status = 'running') AS in_flight
FROM runner.instances i
ORDER BY (i.stopped_at IS NULL AND i.heartbeat_at > now() - interval '15 seconds') DESC,
         i.heartbeat_at DESC, i.instance_id
LIMIT %(limit)s

-- name: runs
-- The Runs page: runs newest slot first, keyset paged on (schedule_slot, id) (the cursor is
-- the last row shown), narrowed by the filters reads.runs composes into {where} (each a
-- parameter; a status, trigger or lane only from fixed lists). Served by the business key
-- with a job, else by job_runs_slot_order, or job_runs_attention_order when the statuses asked
-- are all ones needing attention (schema step 0010_runs).
SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date, r.status, r.trigger,
       r.lane, r.attempt, r.started_at, r.finished_at, r.last_error
FROM runner.job_runs r
WHERE {where}
ORDER BY r.schedule_slot DESC, r.id DESC
LIMIT %(limit)s

-- name: runs_bounded
-- The Runs page with filters no index serves ({residual}: trigger, lane, a partition of any
-- job, statuses not all needing attention): checked on at most %(scan)s runs of the indexed
-- order ({where}), read lazily (the page stops reading once it has its runs).
SELECT r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date, r.status, r.trigger,
       r.lane, r.attempt, r.started_at, r.finished_at, r.last_error
FROM (SELECT r.* FROM runner.job_runs r
      WHERE {where}
      ORDER BY r.schedule_slot DESC, r.id DESC
      LIMIT %(scan)s) r
WHERE {residual}
ORDER BY r.schedule_slot DESC, r.id DESC
LIMIT %(limit)s

-- name: runs_looked
-- When a bounded page came out short: how many runs it looked at, and the oldest of them
-- (where the next page goes on from when that was all %(scan)s).
SELECT l.schedule_slot, l.id, count(*) OVER () AS looked
FROM (SELECT r.schedule_slot, r.id FROM runner.job_runs r
      WHERE {where}
      ORDER BY r.schedule_slot DESC, r.id DESC
      LIMIT %(scan)s) l
ORDER BY l.schedule_slot, l.id
LIMIT 1

-- name: job_definition
-- The job's definition as the ledger holds it (runner.jobs, written by the runners' sync):
-- schedule, zone, partitions, max attempts and the options (misfire policy and tiers, overlap,
-- timeout, lane, owner, stale_after ...); its schedule in words.
SELECT j.job_name, j.schedule_kind, j.cron, j.every_interval, j.timezone, j.partitions,
       j.dynamic_partitions, j.max_attempts, j.version, j.options, j.paused, j.track_from,
       j.first_registered_at, j.synced_at, j.retired_at, j.in_code_at,
       runner.schedule_label_v1(j.schedule_kind, j.cron, j.every_interval, j.timezone, j.partitions,
                                j.dynamic_partitions) AS schedule_label
FROM runner.jobs j
WHERE j.job_name = %(job_name)s

-- name: next_slots
-- The job's next slots after now, from its definition in the ledger (runner.schedule_slots_v1,
-- the gap scan's own expansion), within a horizon the caller widens when it finds too few.
SELECT s.slot
FROM runner.jobs j
CROSS JOIN LATERAL runner.schedule_slots_v1(j.schedule_kind, j.cron, j.every_interval, j.timezone,
                                             now(), now() + CASE WHEN j.schedule_kind = 'every'
                                                 THEN j.every_interval * %(limit)s
                                                 ELSE %(horizon)s::interval END) AS s(slot)
WHERE j.job_name = %(job_name)s
ORDER BY s.slot
LIMIT %(limit)s

-- name: job_zone
-- A job's time zone (the pages about one of its runs or plans offer its times in it).
SELECT j.timezone FROM runner.jobs j WHERE j.job_name = %(job_name)s
