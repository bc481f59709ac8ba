-- effect_unknown: a side effect whose delivery is unknown: status unknown (a send timed out),
-- or sent more than 5 minutes ago and never confirmed while no attempt of its run is running
-- (the sender died mid-send). The next attempt must resolve it with the handler's check.
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_effect_unknown AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'effect_unknown',
           e.job_name,
           job.owner,
           e.run_id,
           format('effect %s (stage %s) is %s since %s: delivery unknown until a check resolves it',
                  e.effect_key, coalesce(e.stage, '-'), e.status, e.updated_at),
           e.updated_at
    FROM runner.effects e LEFT JOIN runner.alert_jobs job ON job.job_name = e.job_name
    WHERE e.status = 'unknown'
       OR (e.status = 'sent' AND e.updated_at < (SELECT runner.ledger_now_v1()) - interval '5 minutes'
           AND NOT EXISTS (SELECT 1 FROM runner.job_runs r
                           WHERE r.id = e.run_id AND r.status = 'running'))
) AS a (kind, job_name, owner, run_id, detail, since);
