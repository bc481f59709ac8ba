-- abandoned: an attempt whose owner died before recording an outcome
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_abandoned AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'abandoned',
           r.job_name,
           job.owner,
           r.id,
           format('run %s, slot %s%s: attempt %s (fence %s) on %s pid %s was abandoned: %s; the run is now %s',
                  r.id, r.schedule_slot,
                  CASE WHEN r.partition_key <> '' THEN format(', partition %L', r.partition_key) ELSE '' END,
                  a.attempt, a.fence, a.owner_host, a.owner_pid,
                  left(coalesce(a.error_message, 'owner lost'), 200), r.status),
           a.finished_at
    FROM runner.attempts a
    JOIN runner.job_runs r ON r.id = a.run_id
    LEFT JOIN runner.alert_jobs job ON job.job_name = r.job_name
    WHERE a.status = 'abandoned'
      AND a.finished_at >= (SELECT runner.ledger_now_v1()) - interval '24 hours'
) AS a (kind, job_name, owner, run_id, detail, since);
