-- Named statements of retention (runner/retention.py). What may be pruned is decided by
-- runner.prune_v1 (sql/functions/prune_v1.sql) from the stored policy, never here.

-- name: prune_count
-- One pass of the background duty: how many runs went.
SELECT count(*) FROM runner.prune_v1(%(batch)s, %(now)s::timestamptz, false, %(namespace)s)

-- name: prune_instances
-- The same pass, then: instance rows that stopped heartbeating long ago (revision 0016_health;
-- runner.prune_instances_v1 decides which, and keeps what job_not_in_code needs of them).
SELECT runner.prune_instances_v1(%(namespace)s)

-- name: prune_lock
-- `runner prune` waits for the fleet's pruning lock (a runner's pass holds it for one short
-- transaction) and holds it for its pass: runner.prune_v1 in the same transaction then takes
-- it again at once (advisory locks are re-entrant), instead of returning nothing as if nothing
-- were left to prune. The background duty never waits: it skips a pass while another holds it.
SELECT pg_advisory_xact_lock(%(namespace)s, runner.duty_lock_key_v1('prune'))

-- name: prune
-- One pass of `runner prune` (or a look, with dry_run): every pruned run with its attempts and
-- effects, for the archive and the report.
SELECT p.job_name, p.run_id, p.schedule_slot, p.status, p.run, p.attempts, p.effects
FROM runner.prune_v1(%(batch)s, %(now)s::timestamptz, %(dry_run)s, %(namespace)s) AS p

-- name: archive_table_create
-- The archive table of `runner prune --archive-table T` ({table}: a quoted identifier).
CREATE TABLE IF NOT EXISTS {table} (
    job_name        text NOT NULL,
    run_id          bigint NOT NULL,
    schedule_slot   timestamptz NOT NULL,
    status          text NOT NULL,
    run             jsonb NOT NULL,
    attempts        jsonb NOT NULL,
    effects         jsonb NOT NULL,
    archived_at     timestamptz NOT NULL DEFAULT now()
)

-- name: archive_table_copy
COPY {table} (job_name, run_id, schedule_slot, status, run, attempts, effects) FROM STDIN

-- name: prune_sweeps
-- Where each job's retention sweep stands (runner.gap_watermarks.prune_cursor, revision
-- 0021_prune), for the jobs runner.prune_v1 sweeps: NULL once every sweep reached the top.
-- `runner prune` goes on while a pass moved one and one is not at the top yet.
SELECT string_agg(w.job_name || '=' || w.prune_cursor::text, ',' ORDER BY w.job_name)
FROM runner.gap_watermarks w
JOIN runner.jobs jb ON jb.job_name = w.job_name AND jb.track_from = w.track_from
WHERE w.prune_cursor IS NOT NULL
  AND w.complete_through IS NOT NULL
  AND jsonb_typeof(jb.options -> 'retention' -> 'succeeded_seconds') = 'number'
