-- effect_duplicate: a side effect sent more than once (allowed only after a check said the
-- earlier send was not delivered; worth a look either way)
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_effect_duplicate AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'effect_duplicate',
           e.job_name,
           job.owner,
           e.run_id,
           format('effect %s (stage %s) was sent %s times', e.effect_key, coalesce(e.stage, '-'),
                  e.send_count),
           e.updated_at
    FROM runner.effects e LEFT JOIN runner.alert_jobs job ON job.job_name = e.job_name
    WHERE e.send_count > 1
) AS a (kind, job_name, owner, run_id, detail, since);
