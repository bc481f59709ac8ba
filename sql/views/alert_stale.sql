-- stale: no success for longer than the job's stale_after
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_stale AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'stale',
           job.job_name,
           job.owner,
           ls.id,
           CASE WHEN ls.id IS NULL
                THEN format('no success since the job was registered at %s (stale_after %ss)',
                            job.first_registered_at, trim_scale(extract(epoch FROM job.stale_after)))
                ELSE format('last success at %s (run %s, slot %s) is older than stale_after (%ss)',
                            ls.finished_at, ls.id, ls.schedule_slot, trim_scale(extract(epoch FROM job.stale_after)))
           END,
           coalesce(ls.finished_at, job.first_registered_at) + job.stale_after
    FROM runner.alert_jobs job
    LEFT JOIN LATERAL (
        SELECT r.id, r.finished_at, r.schedule_slot
        FROM runner.job_runs r
        WHERE r.job_name = job.job_name AND r.status = 'succeeded'
        ORDER BY r.finished_at DESC
        LIMIT 1
    ) ls ON true
    WHERE job.stale_after IS NOT NULL
      AND NOT job.paused
      AND job.retired_at IS NULL
      AND coalesce(ls.finished_at, job.first_registered_at) + job.stale_after < (SELECT runner.ledger_now_v1())
) AS a (kind, job_name, owner, run_id, detail, since);
