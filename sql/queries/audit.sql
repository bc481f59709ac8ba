-- Named statements of the ledger audit (runner/audit.py, `runner check`).

-- name: check
SELECT v.invariant, v.job_name, v.schedule_slot, v.partition_key, v.run_id, v.attempt_id, v.detail
FROM runner.check_v1(%(as_of)s::timestamptz, %(since)s::timestamptz,
                     make_interval(secs => %(stale_after)s)) AS v

-- name: still_orphaned
-- Of the given attempts (reported orphaned_running by a first look), those that are still
-- running with their lock held by no session: pg_locks is read live, so an attempt that
-- finished (and let go of its lock) between the first look's snapshot and its read of
-- pg_locks is not one.
SELECT a.id
FROM runner.attempts a
WHERE a.id = ANY(%(attempt_ids)s::bigint[]) AND a.status = 'running'
  AND NOT EXISTS (
      SELECT 1 FROM pg_catalog.pg_locks l
      WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
        AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname = current_database())
        AND l.classid = ((a.lock_key >> 32) & 4294967295)::oid
        AND l.objid = (a.lock_key & 4294967295)::oid)
