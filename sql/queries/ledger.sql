-- Named statements of the runner's loop (runner/ledger.py). Every time-dependent statement
-- takes the database's clock unless a test passes one: coalesce(%(now)s::timestamptz, now()).

-- name: db_now
SELECT now() AS db_now

-- name: ledger_clock
-- The ledger's now (runner.ledger_now_v1(): a replica's last replayed commit, unless it has
-- replayed all it received) beside the server's, and whether the server is a replica.
SELECT now() AS db_now, runner.ledger_now_v1() AS as_of, pg_is_in_recovery() AS replica

-- name: ledger_copy
-- Whether this ledger is a copy of another, not adopted (runner.ledger_copy_v1), and why.
SELECT c.copied, c.detail FROM runner.ledger_copy_v1() c

-- name: schema_revision
SELECT version_num FROM runner.alembic_version

-- name: sync_job
-- Upsert one job definition; the row lock it takes serialises concurrent syncs of the same
-- job, so sync_schedule (same transaction) sees the other syncer's history row. An existing
-- job's paused flag is the operators' (runner pause/resume): never written here.
INSERT INTO runner.jobs AS j (
    job_name, schedule_kind, cron, every_interval, timezone, partitions, dynamic_partitions,
    max_attempts, version, options, paused, track_from, first_registered_at, synced_at)
VALUES (
    %(job_name)s, %(schedule_kind)s, %(cron)s, %(every_interval)s, %(timezone)s,
    %(partitions)s, %(dynamic_partitions)s, %(max_attempts)s, %(version)s, %(options)s,
    %(paused)s, coalesce(%(track_from)s, coalesce(%(now)s::timestamptz, now())),
    coalesce(%(now)s::timestamptz, now()), coalesce(%(now)s::timestamptz, now()))
ON CONFLICT (job_name) DO UPDATE SET
    schedule_kind = EXCLUDED.schedule_kind,
    cron = EXCLUDED.cron,
    every_interval = EXCLUDED.every_interval,
    timezone = EXCLUDED.timezone,
    partitions = EXCLUDED.partitions,
    dynamic_partitions = EXCLUDED.dynamic_partitions,
    max_attempts = EXCLUDED.max_attempts,
    version = EXCLUDED.version,
    options = EXCLUDED.options,
    -- a code's track_from moves the tracked range earlier, never later (revision 0007_security:
    -- a later start would take slots out of the gap scan; only the schema owner does that)
    track_from = least(coalesce(%(track_from)s, j.track_from), j.track_from),
    synced_at = EXCLUDED.synced_at
-- a job retired since the caller's check (runner retire committed while this waited for the
-- row lock) is not written: no row comes back, and the caller refuses to start (JobRetired)
WHERE j.retired_at IS NULL
RETURNING job_name, paused, track_from

-- name: sync_schedule
-- The job's schedule history for this definition (runner/history.py: appended, left as it is,
-- or held by a live runner of another definition). A start passes reassert false, in the
-- transaction of its sync_job; the history duty of a running runner passes true, on its
-- lock session. One row (none: the job is gone or retired).
SELECT fingerprint, label, current_fingerprint, appended, valid_from, held_by
FROM runner.sync_schedule_v1(
    job_name => %(job_name)s, schedule_kind => %(schedule_kind)s, cron => %(cron)s,
    every_interval => %(every_interval)s::interval, timezone => %(timezone)s,
    partitions => %(partitions)s::text[], dynamic_partitions => %(dynamic_partitions)s,
    instance => %(instance)s::uuid, reassert => %(reassert)s, fresh_for => %(fresh_for)s,
    as_of => %(now)s::timestamptz)

-- name: definitions_behind
-- The jobs whose definition this runner runs (runner.instances.definitions) is not the one
-- its schedule history holds now (runner/history.py re-asserts them).
SELECT d.key AS job_name, h.fingerprint AS current_fingerprint
FROM runner.instances i
CROSS JOIN LATERAL jsonb_each(coalesce(i.definitions, '{}'::jsonb)) AS d(key, value)
JOIN runner.jobs j ON j.job_name = d.key AND j.retired_at IS NULL
LEFT JOIN LATERAL (
    SELECT s.fingerprint FROM runner.job_schedules s
    WHERE s.job_name = d.key ORDER BY s.valid_from DESC LIMIT 1
) h ON true
WHERE i.instance_id = %(instance)s
  AND h.fingerprint IS DISTINCT FROM d.value ->> 'fingerprint'
ORDER BY d.key

-- name: schedules_since
-- Since when each job's current schedule is in force (its newest runner.job_schedules row):
-- slots before that were due under an earlier schedule, and are judged by it.
SELECT s.job_name, max(s.valid_from) FROM runner.job_schedules s
WHERE s.job_name = ANY(%(job_names)s::text[])
GROUP BY s.job_name

-- name: owed_since
-- Where each job's newest span of owed time starts (runner.expected_spans_v1, the one
-- definition): a starting runner claims no on-time slot before it, e.g. a slot between a
-- retirement and the unretirement a moment before the start, or one of a pause just ended
-- (the grace reaches back before them); the misfire duty decides the slots before it that
-- are expected. The first instant in the span (a span's lower bound may be exclusive).
SELECT j.job_name,
       (SELECT CASE WHEN lower_inc(e.span) THEN lower(e.span) ELSE lower(e.span) + interval '1 microsecond' END
        FROM runner.expected_spans_v1(j.job_name) AS e
        ORDER BY lower(e.span) DESC LIMIT 1)
FROM runner.jobs j
WHERE j.job_name = ANY(%(job_names)s::text[])

-- name: retired_jobs
-- Jobs of the code that an operator retired (runner retire): runner start refuses them.
SELECT job_name, retired_at FROM runner.jobs
WHERE retired_at IS NOT NULL AND job_name = ANY(%(job_names)s::text[])
ORDER BY job_name

-- name: paused_jobs
SELECT job_name FROM runner.jobs WHERE paused AND job_name = ANY(%(job_names)s::text[])

-- name: claim_slots
-- The claim: one statement for many slot x partition rows. Each row either becomes a new
-- run owned by this process (status running, attempt 1, fence 1, an attempt row, and the
-- session advisory lock of this connection) or conflicts with the run another process
-- made. Rows not yet due by the database clock, and rows of paused jobs, are not inserted.
-- Overlap: a row whose job says overlap 'skip' or 'wait' and whose job and partition has an
-- earlier slot still running is recorded 'skipped' with the reason (skip) or left for a
-- later claim (wait; their input positions are returned in `waiting`). Always returns at
-- least one row (with the database clock) so the caller can tell.
-- Input, as two JSON documents (one parameter each: cheaper to send than one array per
-- column): groups = [[job, slot, business date, window start, window end, overlap, lane], ...]
-- with ISO 8601 instants, rows = [[group index (0-based), partition key, idempotency key],
-- ...]. A won run is returned as its row's position n (1-based) and its id; the caller has
-- the rest.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), grp AS (
    SELECT (g.ord - 1)::int AS gi, g.e ->> 0 AS job_name, (g.e ->> 1)::timestamptz AS schedule_slot,
           (g.e ->> 2)::date AS business_date, (g.e ->> 3)::timestamptz AS window_start,
           (g.e ->> 4)::timestamptz AS window_end, g.e ->> 5 AS overlap,
           coalesce(g.e ->> 6, 'realtime') AS lane
    FROM jsonb_array_elements(%(groups)s::jsonb) WITH ORDINALITY AS g(e, ord)
), live AS (
    -- what may start is decided per job x slot, not per row (a slot's rows share it)
    SELECT g.gi
    FROM grp g CROSS JOIN clock c
    WHERE g.schedule_slot <= c.now
      -- paused jobs, and slots after a job's retirement (runner retire), start nothing
      AND NOT EXISTS (SELECT 1 FROM runner.jobs j WHERE j.job_name = g.job_name
                      AND (j.paused OR g.schedule_slot > j.retired_at))
      -- nor a slot that fell due while its job was paused (not expected: runner.expected_spans_v1),
      -- claimed on time after the resume committed
      AND NOT EXISTS (SELECT 1 FROM runner.job_pauses p WHERE p.job_name = g.job_name
                      AND p.paused_from <= g.schedule_slot AND g.schedule_slot < p.paused_until)
), input AS (
    SELECT r.ord AS n, g.gi, g.job_name, g.schedule_slot, r.e ->> 1 AS partition_key, g.business_date,
           g.window_start, g.window_end, r.e ->> 2 AS idempotency_key, g.overlap, g.lane
    FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS r(e, ord)
    JOIN grp g ON g.gi = (r.e ->> 0)::int
), due AS (
    SELECT i.* FROM input i WHERE i.gi IN (SELECT gi FROM live)
), checked AS (
    -- busy_with: the running run of an earlier slot, or -1 for an earlier slot in this claim;
    -- overlap 'allow' rows (the default) skip the look (and the sort it needs)
    SELECT d.*, NULL::bigint AS busy_with FROM due d WHERE d.overlap = 'allow'
    UNION ALL
    SELECT o.n, o.gi, o.job_name, o.schedule_slot, o.partition_key, o.business_date, o.window_start,
           o.window_end, o.idempotency_key, o.overlap, o.lane,
           CASE WHEN o.nth > 1 THEN -1
                ELSE (SELECT x.id FROM runner.job_runs x
                      WHERE x.job_name = o.job_name AND x.status = 'running'
                        AND x.partition_key = o.partition_key
                        AND x.schedule_slot < o.schedule_slot
                      ORDER BY x.schedule_slot LIMIT 1) END
    FROM (SELECT d.*, row_number() OVER (PARTITION BY d.job_name, d.partition_key
                                         ORDER BY d.schedule_slot, d.n) AS nth
          FROM due d WHERE d.overlap <> 'allow') AS o
), claimed AS (
    INSERT INTO runner.job_runs AS r (
        job_name, schedule_slot, partition_key, business_date, window_start, window_end,
        status, trigger, attempt, fence, idempotency_key, lane, scheduled_at, started_at, updated_at)
    SELECT i.job_name, i.schedule_slot, i.partition_key, i.business_date, i.window_start,
           i.window_end, 'running', 'schedule', 1, 1, i.idempotency_key, i.lane, c.now, c.now, c.now
    FROM checked i CROSS JOIN clock c
    WHERE i.busy_with IS NULL
    ON CONFLICT (job_name, schedule_slot, partition_key) DO NOTHING
    RETURNING r.id, r.job_name, r.schedule_slot, r.partition_key, r.attempt, r.fence, r.trigger,
              r.started_at
), skipped AS (
    INSERT INTO runner.job_runs AS r (
        job_name, schedule_slot, partition_key, business_date, window_start, window_end,
        status, trigger, idempotency_key, lane, scheduled_at, finished_at, status_reason, updated_at)
    SELECT i.job_name, i.schedule_slot, i.partition_key, i.business_date, i.window_start,
           i.window_end, 'skipped', 'schedule', i.idempotency_key, i.lane, c.now, c.now,
           CASE WHEN i.busy_with = -1 THEN 'overlap=skip: an earlier slot started in the same claim'
                ELSE 'overlap=skip: run ' || i.busy_with || ' of an earlier slot was still running'
           END, c.now
    FROM checked i CROSS JOIN clock c
    WHERE i.busy_with IS NOT NULL AND i.overlap = 'skip'
    ON CONFLICT (job_name, schedule_slot, partition_key) DO NOTHING
), attempt AS (
    INSERT INTO runner.attempts (
        run_id, attempt, fence, trigger, owner_host, owner_pid, owner_instance, lock_key,
        owner_backend_pid, started_at, heartbeat_at)
    SELECT id, attempt, fence, trigger, %(host)s, %(pid)s, %(instance)s,
           runner.lock_key_v1(%(namespace)s, id), pg_backend_pid(), started_at, started_at
    FROM claimed
), won AS (
    -- a row given twice in one claim names the run once (the first position)
    SELECT DISTINCT ON (k.id) k.id, i.n
    FROM claimed k
    JOIN input i ON i.job_name = k.job_name AND i.schedule_slot = k.schedule_slot
                AND i.partition_key = k.partition_key
    ORDER BY k.id, i.n
), waiting AS (
    SELECT array_agg(n) AS ns FROM checked WHERE busy_with IS NOT NULL AND overlap = 'wait'
)
SELECT c.now AS db_now, k.n, k.id,
       CASE WHEN k.id IS NULL THEN NULL
            ELSE pg_try_advisory_lock(runner.lock_key_v1(%(namespace)s, k.id)) END AS locked,
       w.ns AS waiting
FROM clock c CROSS JOIN waiting w
LEFT JOIN won k ON true

-- name: claim_due_runs
-- Runs waiting for their next attempt (failed, due for a retry) or queued (pending: reruns,
-- backfills, approvals, released runs, catch-up runs) start it through
-- runner.start_attempts_v1 (the one way to start an attempt: max_attempts applies; a run out
-- of attempts goes dead instead).
-- Lane by lane (revision 0011_lanes): only the lanes given (those this process serves, with
-- room on it), at most `limits` runs of each (its free handler slots here), and within the
-- lane's fleet budget (runner.lane_budget_v1: concurrency and rate, taken under the lane
-- row's lock, so processes claiming the same lane at once never exceed it). The attempts
-- start at the instant the budget was taken, and pay the lanes' rate buckets
-- (runner.lane_spend_v1). Returns each run's lane after the attempt's columns.
WITH budget AS MATERIALIZED (
    SELECT b.lane,
           least(l.lim, coalesce(b.room, l.lim), coalesce(floor(b.tokens + 1e-9)::int, l.lim)) AS lim,
           b.at
    FROM unnest(%(lanes)s::text[], %(limits)s::int[]) AS l(lane, lim)
    JOIN runner.lane_budget_v1(%(lanes)s::text[], %(now)s::timestamptz) AS b ON b.lane = l.lane
), due AS MATERIALIZED (
    SELECT d.id, d.fence, d.lane
    FROM budget b
    CROSS JOIN LATERAL (
        SELECT r.id, r.fence, r.lane
        FROM runner.job_runs r
        WHERE r.lane = b.lane
          AND r.status IN ('failed', 'pending')
          AND r.next_attempt_at <= coalesce(%(now)s::timestamptz, now())
          AND r.job_name = ANY(%(job_names)s::text[])
          AND NOT EXISTS (SELECT 1 FROM runner.jobs j WHERE j.job_name = r.job_name
                          AND (j.paused OR r.schedule_slot > j.retired_at))
          -- runs of an unfinished backfill plan are the backfill lane's (runner/backfill.py),
          -- except an operator's rerun of one (trigger manual)
          AND (r.replay_group_id IS NULL OR r.trigger = 'manual' OR NOT EXISTS (
                  SELECT 1 FROM runner.backfills p WHERE p.replay_group_id = r.replay_group_id
                    AND p.status IN ('planned', 'running', 'paused')))
          -- late slots replayed (trigger catch_up) run oldest first, one at a time per job and
          -- partition. A replayed run's later attempts change its trigger (retry, recovery
          -- after a takeover or a release at shutdown) but not its lane (correction, where
          -- every replay is written): those still hold the next slot back until done
          AND (r.trigger <> 'catch_up' OR NOT EXISTS (
                  SELECT 1 FROM runner.job_runs x
                  WHERE x.job_name = r.job_name AND x.partition_key = r.partition_key
                    AND (x.trigger = 'catch_up'
                         OR (x.trigger IN ('retry', 'recovery') AND x.lane = 'correction'))
                    AND x.id <> r.id
                    AND (x.status = 'running'
                         OR (x.status IN ('pending', 'failed') AND x.schedule_slot < r.schedule_slot))))
        ORDER BY r.next_attempt_at, r.schedule_slot, r.id
        LIMIT b.lim
        FOR UPDATE OF r SKIP LOCKED
    ) d
    WHERE b.lim > 0
), claimed AS MATERIALIZED (
    SELECT * FROM runner.start_attempts_v1(
        (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM due),
        (SELECT coalesce(array_agg(fence ORDER BY id), '{}') FROM due),
        false, %(host)s, %(pid)s, %(instance)s, %(namespace)s,
        coalesce(%(now)s::timestamptz, (SELECT min(at) FROM budget)))
), spent AS MATERIALIZED (
    SELECT runner.lane_spend_v1(coalesce(array_agg(d.lane), '{}'), coalesce(array_agg(1), '{}'),
                                coalesce(%(now)s::timestamptz, (SELECT min(at) FROM budget))) AS lanes
    FROM claimed k JOIN due d ON d.id = k.id
    WHERE k.outcome = 'started'
)
SELECT coalesce(%(now)s::timestamptz, now()) AS db_now, k.id, k.job_name, k.schedule_slot,
       k.partition_key, k.business_date, k.window_start, k.window_end, k.trigger, k.attempt,
       k.fence, k.idempotency_key, k.uncounted_attempts, k.locked, k.outcome, d.lane
FROM (SELECT 1) AS one
CROSS JOIN spent
LEFT JOIN claimed k ON true
LEFT JOIN due d ON d.id = k.id

-- name: all_lanes
SELECT lane FROM runner.lanes ORDER BY rank, lane

-- name: finish_attempts
-- The one place that writes attempt outcomes, for a batch of attempts: fence-checked, in
-- runner.finish_attempts_v1 (sql/functions/finish_attempts_v1.sql says what lands and why),
-- so that the worker role needs no UPDATE of run or attempt statuses. outcomes = [[run id,
-- fence, status, attempt status, error class, error message, retry delay, processed,
-- failed], ...] as one JSON document; returns, per input row, whether it landed.
SELECT f.run_id, f.fence, f.recorded
FROM runner.finish_attempts_v1(%(outcomes)s::jsonb, %(now)s::timestamptz) AS f

-- name: unlock_runs
SELECT pg_advisory_unlock(runner.lock_key_v1(%(namespace)s, run_id)) AS released
FROM unnest(%(run_ids)s::bigint[]) AS run_id

-- name: key_holder
-- An attempt started while another session held its run's key (runner/loop.py _key_held):
-- whether the key is free now (then this session takes it), else whether a registered
-- runner session holds it (an outcome being recorded, its unlock a round trip behind) or a
-- runner's condition session does (a pause condition that took run keys: held for one
-- evaluation at most, which fails for it, runner.pause_condition_v1; issue 28 point 3), and
-- how many attempts in a row, just before this one, were released for that already
-- (runner.condition_sessions_v1 says which sessions are runners' condition sessions).
SELECT pg_try_advisory_lock(runner.lock_key_v1(%(namespace)s, %(run_id)s)) AS got,
       EXISTS (
           SELECT 1 FROM pg_locks l
           WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
             AND ((l.classid::bigint << 32) | l.objid::bigint) = runner.lock_key_v1(%(namespace)s, %(run_id)s)
             AND (l.pid IN (SELECT runner.runner_sessions_v1())
                  OR l.pid IN (SELECT runner.condition_sessions_v1()))) AS by_runner,
       (SELECT count(*) FROM runner.attempts a
        WHERE a.run_id = %(run_id)s AND a.fence < %(fence)s
          AND a.status = 'released' AND a.error_class = 'runner.LockBusy'
          AND a.fence > coalesce((SELECT max(b.fence) FROM runner.attempts b
                                  WHERE b.run_id = %(run_id)s AND b.fence < %(fence)s
                                    AND NOT (b.status = 'released'
                                             AND b.error_class IS NOT DISTINCT FROM 'runner.LockBusy')),
                                 0)) AS busy_streak

-- name: run_is_current
-- After an attempt that started without its key took it (runner/loop.py _key_held): whether
-- the run is still running at the attempt's fence. Its own statement, after the lock: a
-- takeover that finished before the key was free is then visible.
SELECT EXISTS (SELECT 1 FROM runner.job_runs
               WHERE id = %(run_id)s AND fence = %(fence)s AND status = 'running') AS current

-- name: heartbeat_attempt
-- Progress of one attempt, fence-checked: no row returned means the attempt lost its run.
WITH run AS (
    UPDATE runner.job_runs
    SET processed_count = coalesce(%(processed)s, processed_count),
        failed_count = coalesce(%(failed)s, failed_count),
        updated_at = coalesce(%(now)s::timestamptz, now())
    WHERE id = %(run_id)s AND fence = %(fence)s AND status = 'running'
    RETURNING id
)
UPDATE runner.attempts a
SET heartbeat_at = coalesce(%(now)s::timestamptz, now())
FROM run
WHERE a.run_id = run.id AND a.fence = %(fence)s AND a.status = 'running'
RETURNING a.id

-- name: heartbeat_attempts
-- The loop's liveness beat for every attempt this process runs (one statement). A stopped
-- or partitioned process stops beating; its attempts' heartbeats age past their lease.
-- It never waits for a row lock: an attempt whose row another statement holds (its outcome
-- being recorded by the completer, its own ctx.heartbeat) is skipped this beat. Waiting
-- would let this statement and a finish batch lock the same attempts in different orders
-- and deadlock (tests/test_ledger.py: beats, outcomes and takeovers never deadlock).
UPDATE runner.attempts a SET heartbeat_at = coalesce(%(now)s::timestamptz, now())
FROM (SELECT x.id FROM runner.attempts x
      WHERE x.owner_instance = %(instance)s AND x.status = 'running'
        AND x.run_id = ANY(%(run_ids)s::bigint[])
      FOR UPDATE SKIP LOCKED) AS free
WHERE a.id = free.id

-- name: register_instance
-- definitions: {job: {"fingerprint", "schedule"}} of each job in this runner's code
-- (runner/history.py): the runners of another definition read them
-- lanes: {lane: handler slots} this process serves (revision 0008_watch; the Runners page)
INSERT INTO runner.instances (instance_id, host, pid, backend_pid, lock_namespace, runner_version, jobs,
                              definitions, lanes)
VALUES (%(instance)s, %(host)s, %(pid)s, pg_backend_pid(), %(namespace)s, %(runner_version)s,
        %(jobs)s::text[], %(definitions)s::jsonb, %(lanes)s::jsonb)

-- name: live_instances
-- The runner processes that share out slots: not stopped, heartbeat fresh, same lock
-- namespace, and their lock session still connected (a process killed outright loses its
-- session at once, long before its heartbeat ages); with the jobs each serves. Connected to
-- this database: the instance rows of a ledger copied from another database of the cluster
-- name its source's sessions, which are no peers here (issue 29, point 6).
SELECT i.instance_id, coalesce(i.jobs, '{}') AS jobs
FROM runner.instances i
WHERE i.stopped_at IS NULL AND i.lock_namespace = %(namespace)s
  AND i.heartbeat_at > now() - make_interval(secs => %(fresh_for)s)
  AND (i.backend_pid IS NULL
       OR EXISTS (SELECT 1 FROM pg_stat_activity a
                  WHERE a.pid = i.backend_pid AND a.datname = current_database()))
ORDER BY i.instance_id

-- name: unclaimed_rows
-- Of the given slot x partition rows, the positions (1-based) of those with no run yet: the
-- others' shares of a slot still to claim. Input as two JSON documents, as the claim's:
-- groups = [[job, slot], ...], rows = [[group index (0-based), partition], ...]. Checked by
-- key (one probe of the business key each), never by counting a slot's runs: runners with
-- different partition lists (a rolling deploy) would otherwise see a slot as settled while
-- one of their partitions has no run.
WITH grp AS (
    SELECT (g.ord - 1)::int AS gi, g.e ->> 0 AS job_name, (g.e ->> 1)::timestamptz AS schedule_slot
    FROM jsonb_array_elements(%(groups)s::jsonb) WITH ORDINALITY AS g(e, ord)
)
-- (LATERAL ... LIMIT 1: one probe of the business key per row, whatever the statistics of a
-- young ledger say; a hash anti-join of every run, or a scan of every run per row, took seconds)
SELECT r.ord
FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS r(e, ord)
JOIN grp g ON g.gi = (r.e ->> 0)::int
LEFT JOIN LATERAL (SELECT x.id FROM runner.job_runs x
                   WHERE x.job_name = g.job_name AND x.schedule_slot = g.schedule_slot
                     AND x.partition_key = r.e ->> 1
                   LIMIT 1) AS run ON true
WHERE run.id IS NULL

-- name: heartbeat_instance
-- (on the lock session: after a reconnect, backend_pid names the new one)
UPDATE runner.instances SET heartbeat_at = now(), backend_pid = pg_backend_pid()
WHERE instance_id = %(instance)s

-- name: stop_instance
UPDATE runner.instances SET stopped_at = now(), heartbeat_at = now()
WHERE instance_id = %(instance)s

-- name: record_fanout
-- The partitions a job expects at one slot (runner.slot_fanouts), recorded before any of its
-- runs is claimed; the first recorded set wins. Returns the set in force: this one, or the
-- one another runner recorded first (NULL when that one is not yet visible: read again).
WITH ins AS (
    INSERT INTO runner.slot_fanouts (job_name, schedule_slot, partitions, error)
    VALUES (%(job_name)s, %(slot)s, %(partitions)s::text[], %(error)s)
    ON CONFLICT (job_name, schedule_slot) DO NOTHING
    RETURNING partitions, error
)
SELECT partitions, error FROM ins
UNION ALL
SELECT f.partitions, f.error FROM runner.slot_fanouts f
WHERE f.job_name = %(job_name)s AND f.schedule_slot = %(slot)s AND NOT EXISTS (SELECT 1 FROM ins)

-- name: fanout_of
SELECT partitions, error FROM runner.slot_fanouts
WHERE job_name = %(job_name)s AND schedule_slot = %(slot)s

-- name: checkpoint
-- A fenced checkpoint in the handler's ctx.db transaction (runner/checkpoints.py): no row
-- means the attempt no longer holds its run's fence.
SELECT checkpoints FROM runner.checkpoint_v1(%(run_id)s, %(fence)s, %(state)s::jsonb,
                                             %(summary)s, %(max_bytes)s)

-- name: run_checkpoint
-- The state a new attempt resumes from (ctx.resume): the run's last committed checkpoint.
SELECT checkpoint FROM runner.job_runs WHERE id = %(run_id)s
