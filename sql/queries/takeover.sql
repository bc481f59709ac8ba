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
), hung AS (
    SELECT DISTINCT l.pid AS holder, a.run_id, a.heartbeat_at
    FROM runner.attempts a
    JOIN runner.job_runs r ON r.id = a.run_id AND r.fence = a.fence AND r.status = 'running'
    JOIN runner.jobs j ON j.job_name = r.job_name
    CROSS JOIN clock c
    JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
         AND l.classid = ((a.lock_key >> 32) & 4294967295)::oid
         AND l.objid = (a.lock_key & 4294967295)::oid
    WHERE a.status = 'running'
      AND r.job_name = ANY(%(job_names)s::text[])
      AND a.heartbeat_at < c.now - make_interval(
              secs => coalesce((j.options ->> 'lease_seconds')::float8, %(default_lease)s))
      AND l.pid <> pg_backend_pid()
), holders AS (
    SELECT holder, min(run_id) AS run_id, min(heartbeat_at) AS heartbeat_at
    FROM hung GROUP BY holder
)
SELECT holder, run_id, heartbeat_at, runner.try_terminate_v1(holder) AS terminated
FROM holders

-- name: take_over_orphans
-- Running runs whose lock nobody holds: lock each on this (the lock) session, then, in the
-- same statement, re-check status and fence while taking over, so a completion that lands
-- meanwhile wins. The old attempt is closed as abandoned. A run with attempts left (counted
-- attempts -- attempt - uncounted_attempts -- below its job's max_attempts) starts a new
-- attempt with a higher fence and trigger recovery; a run without goes dead: an owner that
-- died max_attempts times (a handler that kills its process) ends the loop, it does not
-- crash every runner that takes it over. Returns every run locked (taken or not), so the
-- caller can release the locks of runs it did not take.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), orphan AS (
    SELECT r.id, r.fence
    FROM runner.job_runs r
    WHERE r.status = 'running'
      AND r.job_name = ANY(%(job_names)s::text[])
      AND NOT EXISTS (
          SELECT 1 FROM pg_locks l
          WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND l.classid = ((runner.lock_key_v1(%(namespace)s, r.id) >> 32) & 4294967295)::oid
            AND l.objid = (runner.lock_key_v1(%(namespace)s, r.id) & 4294967295)::oid)
    ORDER BY r.id
    LIMIT %(limit)s
), locked AS MATERIALIZED (
    SELECT id, fence FROM orphan
    WHERE pg_try_advisory_lock(runner.lock_key_v1(%(namespace)s, id))
), budget AS MATERIALIZED (
    SELECT l.id, l.fence, (r.attempt - r.uncounted_attempts) < j.max_attempts AS attempts_left,
           r.attempt - r.uncounted_attempts AS counted, j.max_attempts
    FROM locked l
    JOIN runner.job_runs r ON r.id = l.id
    JOIN runner.jobs j ON j.job_name = r.job_name
), taken AS (
    UPDATE runner.job_runs r
    SET fence = r.fence + 1,
        attempt = r.attempt + 1,
        trigger = 'recovery',
        started_at = c.now,
        updated_at = c.now
    FROM budget b, clock c
    WHERE r.id = b.id AND r.fence = b.fence AND r.status = 'running' AND b.attempts_left
    RETURNING r.id, r.job_name, r.schedule_slot, r.partition_key, r.business_date,
              r.window_start, r.window_end, r.trigger, r.attempt, r.fence, r.idempotency_key,
              r.uncounted_attempts, r.started_at
), exhausted AS (
    UPDATE runner.job_runs r
    SET status = 'dead',
        fence = r.fence + 1,
        finished_at = c.now,
        next_attempt_at = NULL,
        last_error = 'runner.OwnerLost: the owner''s lock session ended before it recorded an '
                     'outcome, ' || b.counted || ' of max_attempts=' || b.max_attempts
                     || ' attempts counted (a handler that ends its process?)',
        updated_at = c.now
    FROM budget b, clock c
    WHERE r.id = b.id AND r.fence = b.fence AND r.status = 'running' AND NOT b.attempts_left
    RETURNING r.id, r.fence
), abandoned AS (
    UPDATE runner.attempts a
    SET status = 'abandoned',
        finished_at = c.now,
        error_class = 'runner.OwnerLost',
        error_message = 'the owner''s lock session ended before it recorded an outcome'
    FROM (SELECT id, fence FROM taken UNION ALL SELECT id, fence FROM exhausted) AS t, clock c
    WHERE a.run_id = t.id AND a.fence < t.fence AND a.status = 'running'
), attempt AS (
    INSERT INTO runner.attempts (
        run_id, attempt, fence, trigger, owner_host, owner_pid, owner_instance, lock_key,
        owner_backend_pid, started_at, heartbeat_at)
    SELECT id, attempt, fence, trigger, %(host)s, %(pid)s, %(instance)s,
           runner.lock_key_v1(%(namespace)s, id), pg_backend_pid(), started_at, started_at
    FROM taken
)
SELECT c.now AS db_now, locked.id AS locked_id, t.id, t.job_name, t.schedule_slot,
       t.partition_key, t.business_date, t.window_start, t.window_end, t.trigger, t.attempt,
       t.fence, t.idempotency_key, t.uncounted_attempts, t.id IS NOT NULL AS locked,
       x.id IS NOT NULL AS exhausted
FROM clock c
LEFT JOIN locked ON true
LEFT JOIN taken t ON t.id = locked.id
LEFT JOIN exhausted x ON x.id = locked.id

-- name: relock_runs
-- After the lock session was lost and re-established: lock again the runs this process
-- still executes, where nobody took them over meanwhile (same fence, still running).
WITH mine AS (
    SELECT * FROM unnest(%(run_ids)s::bigint[], %(fences)s::bigint[]) AS t(id, fence)
), still AS MATERIALIZED (
    SELECT m.id FROM mine m
    JOIN runner.job_runs r ON r.id = m.id AND r.fence = m.fence AND r.status = 'running'
), locked AS MATERIALIZED (
    SELECT id FROM still WHERE pg_try_advisory_lock(runner.lock_key_v1(%(namespace)s, id))
), beat AS (
    UPDATE runner.attempts a SET owner_backend_pid = pg_backend_pid()
    FROM locked, mine m
    WHERE a.run_id = locked.id AND m.id = locked.id AND a.fence = m.fence AND a.status = 'running'
)
SELECT id FROM locked
