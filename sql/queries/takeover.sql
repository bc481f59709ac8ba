-- Named statements of the takeover duty (runner/takeover.py).
--
-- A running run's live owner holds its advisory lock (runner.lock_key_v1) on a session of
-- its process. PostgreSQL drops that lock when the session ends, so "running, and nobody
-- holds the lock" means the owner is gone: any runner may take the run over at once.
-- Session advisory locks with one bigint key appear in pg_locks as locktype 'advisory',
-- objsubid 1, classid = high 32 bits, objid = low 32 bits of the key.

-- name: end_hung_owners
-- Attempts whose heartbeat is older than their job's lease while their lock is still held:
-- the owner process is stopped, partitioned or hung. End the holder's session so the lock is
-- released and the run can be taken over. Ending it needs the pg_signal_backend role (or
-- superuser, or the same role as the holder); without it runner.try_terminate_v1 returns
-- false and the hung attempt stays reported until its owner resumes or dies.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), late AS MATERIALIZED (
    -- attempts past their lease first (almost always none), then their holders in pg_locks:
    -- never a scan of the lock table per running attempt
    SELECT a.run_id, a.heartbeat_at, a.lock_key
    FROM runner.job_runs r
    JOIN runner.attempts a ON a.run_id = r.id AND a.fence = r.fence AND a.status = 'running'
    JOIN runner.jobs j ON j.job_name = r.job_name
    CROSS JOIN clock c
    WHERE r.status = 'running'
      AND r.job_name = ANY(%(job_names)s::text[])
      AND a.heartbeat_at < c.now - make_interval(
              secs => coalesce((j.options ->> 'lease_seconds')::float8, %(default_lease)s))
), held AS MATERIALIZED (
    SELECT l.pid, (l.classid::bigint << 32) | l.objid::bigint AS lock_key
    FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND l.pid <> pg_backend_pid() AND l.pid IS DISTINCT FROM %(lock_pid)s::integer
), hung AS (
    SELECT DISTINCT l.pid AS holder, a.run_id, a.heartbeat_at
    FROM late a
    JOIN held l ON l.lock_key = a.lock_key
    -- only a registered runner session is an owner; any other holder is a squatter
    -- (squatters), and runner.try_terminate_v1 checks it again
    WHERE l.pid IN (SELECT runner.runner_sessions_v1())
), holders AS (
    SELECT holder, min(run_id) AS run_id, min(heartbeat_at) AS heartbeat_at
    FROM hung GROUP BY holder
)
SELECT holder, run_id, heartbeat_at, runner.try_terminate_v1(holder) AS terminated
FROM holders

-- name: squatters
-- Sessions that hold advisory keys of this runner's lock namespace and are not registered
-- runner sessions (runner.runner_sessions_v1): an application sharing the namespace, any
-- login taking keys on purpose, or a pooled backend left holding keys by a runner that went
-- through a transaction pool. While one holds a running run's key, that run cannot be
-- recovered; a run due to take its key fails (runner.LockUnavailable, counted). Reported,
-- never ended: a runner ends only sessions proven to be runners' own (runner.try_terminate_v1);
-- runner.alerts shows them (lock_squatter).
WITH held AS MATERIALIZED (
    SELECT l.pid, ((l.classid::bigint & 65535) << 32) | l.objid::bigint AS run_id
    FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND (l.classid::bigint >> 16) = %(namespace)s
      AND l.pid <> pg_backend_pid()
), squatter AS MATERIALIZED (
    SELECT h.pid, array_agg(h.run_id ORDER BY h.run_id) AS run_ids
    FROM held h
    WHERE h.pid NOT IN (SELECT runner.runner_sessions_v1())
      -- a runner's condition session inside an evaluation lets go within 3 s by itself, and
      -- its evaluation must end to flag the condition (runner.condition_sessions_v1)
      AND h.pid NOT IN (SELECT runner.condition_sessions_v1())
    GROUP BY h.pid
)
SELECT s.pid, s.run_ids, a.usename, a.application_name
FROM squatter s
LEFT JOIN pg_stat_activity a ON a.pid = s.pid

-- name: take_over_orphans
-- Running runs whose lock nobody holds, of the lanes given and at most each lane's limit
-- (oldest run first within a lane), start a recovery attempt through
-- runner.start_attempts_v1 (the one way to start an attempt), which takes each run's lock on
-- this (the lock) session and re-checks status and fence under the run's row lock, so a
-- completion that lands meanwhile wins. The old attempt is closed as abandoned. A recovery
-- counts against max_attempts like any other attempt: a run whose owner died that many
-- times (a handler that kills its process) goes dead, and its lock must be released by the
-- caller (outcome 'dead').
-- The held keys are read once per statement (MATERIALIZED), the running runs from their
-- partial index, and the two meet in one hashed NOT IN: a NOT EXISTS over pg_locks per run
-- rescans the whole lock table for every running run (2,000 runs in flight x 2,000 locks: a
-- second per pass on the lock session, which then claims nothing), and a NOT EXISTS over the
-- materialized keys was still planned as a nested loop over them (0.13 s a pass at 2,000
-- running runs and 1,000 held keys; 6 ms with the hashed NOT IN). The snapshot of pg_locks
-- is read after the statement's snapshot of job_runs, so a run seen running was locked by its
-- owner before it is looked up here; runner.start_attempts_v1 takes each lock anyway.
WITH held AS MATERIALIZED (
    SELECT (l.classid::bigint << 32) | l.objid::bigint AS lock_key
    FROM pg_locks l
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
), room AS MATERIALIZED (
    -- the lanes this process serves, each with its free in-flight room here (revision
    -- 0011_lanes; runner/loop.py Worker._take_over): a run of another lane is never taken,
    -- and a lane takes over at most its room, so a takeover counts toward the lane's cap.
    -- NULL lanes: every lane, at most limit in all.
    SELECT t.lane, t.n
    FROM unnest(%(lanes)s::text[], %(limits)s::int[]) AS t(lane, n)
    WHERE t.n > 0
), running AS MATERIALIZED (
    SELECT r.id, r.fence, r.lane
    FROM runner.job_runs r
    WHERE r.status = 'running'
      AND r.job_name = ANY(%(job_names)s::text[])
      AND (%(lanes)s::text[] IS NULL OR r.lane IN (SELECT lane FROM room))
), unheld AS MATERIALIZED (
    -- NOT IN over the held keys: a hashed subplan, built once (a NOT EXISTS may be planned
    -- as a nested loop over the held CTE: 2,000 running runs x 1,000 keys took 0.13 s a pass)
    SELECT r.id, r.fence, r.lane
    FROM running r
    WHERE runner.lock_key_v1(%(namespace)s, r.id) NOT IN (SELECT h.lock_key FROM held h)
), orphan AS MATERIALIZED (
    SELECT o.id, o.fence, o.lane
    FROM (SELECT r.id, r.fence, r.lane, row_number() OVER (PARTITION BY r.lane ORDER BY r.id) AS nth
          FROM unheld r
          -- an attempt started seconds ago on a live runner session that does not hold its
          -- key is being decided by its owner (the key was held by another runner's session,
          -- between an outcome's commit and its unlock: runner/loop.py Worker._key_held): not
          -- an orphan, unless its owner never decides. (Looked up for the unheld runs only,
          -- after the hash anti-join above: for every running run it costs an index probe.)
          WHERE NOT EXISTS (SELECT 1 FROM runner.attempts a
                            WHERE a.run_id = r.id AND a.fence = r.fence AND a.status = 'running'
                              AND a.started_at > coalesce(%(now)s::timestamptz, now()) - interval '5 seconds'
                              AND a.owner_backend_pid IN (SELECT runner.runner_sessions_v1()))) AS o
    WHERE %(lanes)s::text[] IS NULL OR o.nth <= (SELECT room.n FROM room WHERE room.lane = o.lane)
    ORDER BY o.id
    LIMIT %(limit)s
)
SELECT coalesce(%(now)s::timestamptz, now()) AS db_now, k.id, k.job_name, k.schedule_slot,
       k.partition_key, k.business_date, k.window_start, k.window_end, k.trigger, k.attempt,
       k.fence, k.idempotency_key, k.uncounted_attempts, k.locked, k.outcome, o.lane
FROM (SELECT 1) AS one
LEFT JOIN runner.start_attempts_v1(
    (SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM orphan),
    (SELECT coalesce(array_agg(fence ORDER BY id), '{}') FROM orphan),
    true, %(host)s, %(pid)s, %(instance)s, %(namespace)s, %(now)s::timestamptz) AS k ON true
LEFT JOIN orphan o ON o.id = k.id

-- name: relock_runs
-- After the lock session was lost and re-established: lock again the runs this process
-- still executes, where nobody took them over meanwhile (same fence, still running).
WITH mine AS (
    SELECT * FROM unnest(%(run_ids)s::bigint[], %(fences)s::bigint[]) AS t(id, fence)
), still AS MATERIALIZED (
    SELECT DISTINCT m.id, m.fence FROM mine m
    JOIN runner.job_runs r ON r.id = m.id AND r.fence = m.fence AND r.status = 'running'
), locked AS MATERIALIZED (
    SELECT id, fence FROM still WHERE pg_try_advisory_lock(runner.lock_key_v1(%(namespace)s, id))
), beat AS (
    UPDATE runner.attempts a SET owner_backend_pid = pg_backend_pid()
    FROM locked
    WHERE a.run_id = locked.id AND a.fence = locked.fence AND a.status = 'running'
)
SELECT id, fence FROM locked
