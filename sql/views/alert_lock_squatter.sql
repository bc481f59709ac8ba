-- lock_squatter: one row per session that is not a registered runner session and holds
-- advisory keys of a runner lock namespace (namespace = the key's top 16 bits, run id = its
-- low 48 bits); job_name and run_id: the least of those of its keys' runs that exist
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_lock_squatter AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'lock_squatter',
           min(sq.job_name),
           min(sq.owner),
           min(sq.run_id),
           format('session %s (user %s, application %s) is not a registered runner session and holds '
                  '%s advisory key(s) of runner lock namespace %s (runs %s%s): a run it holds cannot '
                  'be recovered, a run due to take its key fails; end it (pg_terminate_backend), or '
                  'give the runners a lock namespace of their own (RUNNER_LOCK_NAMESPACE)',
                  sq.pid, coalesce(quote_literal(min(sq.usename)::text COLLATE "default"), '?'),
                  coalesce(quote_literal(min(sq.application_name)), '?'), count(*),
                  string_agg(DISTINCT sq.namespace::text, ', '),
                  string_agg(sq.key_run || CASE WHEN sq.run_id IS NULL THEN ' (not created yet)'
                                                ELSE ' (' || sq.status || ')' END, ', ' ORDER BY sq.key_run)
                      FILTER (WHERE sq.n <= 10),
                  CASE WHEN count(*) > 10 THEN ', ...' ELSE '' END),
           min(sq.backend_start)
    FROM (
        SELECT l.pid, a.usename, a.application_name, a.backend_start, l.classid::bigint >> 16 AS namespace,
               ((l.classid::bigint & 65535) << 32) | l.objid::bigint AS key_run,
               r.id AS run_id, r.job_name, r.status, job.owner,
               row_number() OVER (PARTITION BY l.pid ORDER BY l.classid, l.objid) AS n
        FROM pg_locks l
        LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        LEFT JOIN runner.job_runs r ON r.id = ((l.classid::bigint & 65535) << 32) | l.objid::bigint
        LEFT JOIN runner.alert_jobs job ON job.job_name = r.job_name
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND (l.classid::bigint >> 16) IN (SELECT i.lock_namespace FROM runner.instances i)
          AND l.pid NOT IN (SELECT runner.runner_sessions_v1())
    ) sq
    GROUP BY sq.pid
) AS a (kind, job_name, owner, run_id, detail, since);
