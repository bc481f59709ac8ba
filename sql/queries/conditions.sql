-- Named statements of backfill pause conditions (runner/conditions.py): which plans'
-- conditions are due, the plan lock of an evaluation, the evaluation itself (through
-- runner.pause_condition_v1, as the condition role) and the session's reset after it. The
-- outcome is recorded with the backfill lane's own statements (sql/queries/backfill.sql:
-- pause_checked, pause_plan).

-- name: due_conditions
-- The running plans of these jobs whose pause condition is due (never checked, or last
-- checked at least its pause_every seconds ago; `every`, when not NULL, in place of it: a
-- test's pace).
SELECT b.id, b.job_name
FROM runner.backfills b
WHERE b.status = 'running'
  AND b.pause_when IS NOT NULL
  AND b.job_name = ANY(%(job_names)s::text[])
  AND (b.pause_checked_at IS NULL
       OR b.pause_checked_at <= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => coalesce(%(every)s::float8, b.pause_every)))
ORDER BY b.id

-- name: lock_condition
-- One runner at a time evaluates a plan's condition: a transaction-level advisory lock in
-- the two-int form (lock namespace, -plan id). The lane's pass of the plan takes (namespace,
-- plan id), so an evaluation never holds up the lane; two-int keys never meet the one-bigint
-- keys of runs; a condition cannot release a transaction-level lock. Taken with try: a
-- runner that does not get it leaves the evaluation to the holder. Under the lock, whether
-- the condition is still due (another runner may have just checked it) and its text.
SELECT b.pause_when
FROM runner.backfills b
WHERE b.id = %(plan_id)s
  AND pg_try_advisory_xact_lock(%(namespace)s::int, -%(plan_id)s::int)
  AND b.status = 'running'
  AND b.pause_when IS NOT NULL
  AND (b.pause_checked_at IS NULL
       OR b.pause_checked_at <= coalesce(%(now)s::timestamptz, now()) - make_interval(secs => coalesce(%(every)s::float8, b.pause_every)))

-- name: evaluate
-- The condition, run as the condition role (sql/functions/pause_condition_v1.sql).
SELECT runner.pause_condition_v1(%(condition)s) AS value

-- name: advisory_locks_held
-- Advisory locks this session holds beyond the evaluation's own plan lock: a condition
-- that took some (they are released right after, by release_locks).
SELECT count(*) AS held
FROM pg_locks l
WHERE l.pid = pg_backend_pid() AND l.locktype = 'advisory'
  AND NOT (l.objsubid = 2 AND l.classid = %(namespace)s::int::oid
           AND l.objid = ((-%(plan_id)s::int)::bigint & 4294967295)::oid)

-- name: advisory_locks_of
-- The advisory locks (held or awaited) of the condition session whose backend is `pid`,
-- read from another connection while the condition's statement runs (runner/worker/
-- conditions.py ``Watcher``): one identity per lock, its key and mode.
SELECT concat_ws('/', l.classid, l.objid, l.objsubid, l.mode) AS lock
FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.pid = %(pid)s

-- name: ledger_place
-- Where this ledger lives (runner.ledger_copy_v1's current identity) and whether this server
-- is a hot standby: a condition standby (`runner start --condition-url`) must be in recovery
-- and show the primary's system identifier and database oid (a physical copy of it).
SELECT pg_is_in_recovery() AS in_recovery, c.system_identifier, c.database_oid
FROM runner.ledger_copy_v1() c

-- name: release_locks
-- Every session-level advisory lock of this session (a condition may have taken some).
SELECT pg_advisory_unlock_all()
