-- job_not_in_code: defined by no live runner for longer than runner.job_not_in_code_after
-- (revision 0009; a setting that is not a usable interval counts as unset, 24 hours, and
-- raises a bad_setting alert: revision 0023_settings). Live: not stopped, heartbeat within the last 15 s (3 instance heartbeats,
-- as the shares count them). Last defined: the newest heartbeat of any runner, live or not,
-- whose code had the job (the instance rows kept, one pass over them for every job, and
-- runner.jobs.in_code_at for those retention deleted: revision 0016_health), else the job's
-- last sync.
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_job_not_in_code AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'job_not_in_code',
           job.job_name,
           job.owner,
           NULL::bigint,
           format('job %s is in no live runner''s code since %s (longer than %s): retire it '
                  '(runner retire) or deploy it again', quote_literal(job.job_name), seen.at,
                  limits.after),
           seen.at + limits.after
    FROM runner.alert_jobs job
    CROSS JOIN LATERAL (
        SELECT coalesce(runner.interval_setting_v1('runner.job_not_in_code_after'),
                        interval '24 hours') AS after
    ) limits
    LEFT JOIN (
        SELECT x.job_name, max(i.heartbeat_at) AS at
        FROM runner.instances i CROSS JOIN LATERAL unnest(i.jobs) AS x(job_name)
        GROUP BY x.job_name
    ) defined ON defined.job_name = job.job_name
    CROSS JOIN LATERAL (SELECT greatest(job.synced_at, job.in_code_at, defined.at) AS at) seen
    WHERE job.retired_at IS NULL
      AND seen.at + limits.after < (SELECT runner.ledger_now_v1())
      AND EXISTS (SELECT 1 FROM runner.instances i
                  WHERE i.stopped_at IS NULL AND i.heartbeat_at > (SELECT runner.ledger_now_v1()) - interval '15 seconds')
      AND NOT EXISTS (SELECT 1 FROM runner.instances i
                      WHERE i.stopped_at IS NULL AND i.heartbeat_at > (SELECT runner.ledger_now_v1()) - interval '15 seconds'
                        AND i.jobs @> ARRAY[job.job_name])
) AS a (kind, job_name, owner, run_id, detail, since);
