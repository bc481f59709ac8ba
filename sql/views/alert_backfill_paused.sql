-- backfill_paused: a backfill plan that paused itself (max_failures, pause_when) or was paused
-- by an operator (runner.backfills, revision 0003; runner/backfill.py)
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_backfill_paused AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'backfill_paused',
           b.job_name,
           job.owner,
           NULL::bigint,
           format('backfill %s paused: %s', b.id, coalesce(b.pause_reason, 'no reason recorded')),
           coalesce(b.paused_at, b.updated_at)
    FROM runner.backfills b LEFT JOIN runner.alert_jobs job ON job.job_name = b.job_name
    WHERE b.status = 'paused'
) AS a (kind, job_name, owner, run_id, detail, since);
