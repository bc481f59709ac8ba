-- dead: no more automatic attempts
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_dead AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'dead'::text AS kind,
           r.job_name,
           job.owner,
           r.id AS run_id,
           format('run %s, slot %s%s: dead after %s attempt(s): %s',
                  r.id, r.schedule_slot,
                  CASE WHEN r.partition_key <> '' THEN format(', partition %L', r.partition_key) ELSE '' END,
                  r.attempt, left(coalesce(r.last_error, r.status_reason, 'no error recorded'), 300)
           ) AS detail,
           coalesce(r.finished_at, r.updated_at) AS since
    FROM runner.job_runs r
    LEFT JOIN runner.alert_jobs job ON job.job_name = r.job_name
    WHERE r.status = 'dead'
) AS a (kind, job_name, owner, run_id, detail, since);
