-- late: the latest slot past its deadline (slot + grace) is not done
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_late AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'late',
           job.job_name,
           job.owner,
           due.open_run_id,
           format('slot %s: not done by %s (grace %ss): %s',
                  s.slot, s.slot + job.grace, trim_scale(extract(epoch FROM job.grace)),
                  CASE WHEN due.runs = 0 THEN 'no run at all'
                       ELSE format('%s of %s run(s) done%s', due.done,
                                   greatest(due.runs, coalesce(cardinality(job.partitions), 1)),
                                   coalesce('; open: ' || due.open_statuses, ''))
                  END),
           s.slot + job.grace
    FROM runner.alert_jobs job
    CROSS JOIN LATERAL (
        SELECT CASE
                   WHEN job.schedule_kind = 'every' THEN
                       -- the latest whole multiple of the interval since the epoch, at or before
                       -- now - grace; in microseconds, exact (to_timestamp(0), not a timestamptz
                       -- literal: a view keeps a literal as text in the creating session's zone)
                       to_timestamp(0) + interval '1 microsecond' * (
                           floor(extract(epoch FROM now() - job.grace)
                                 / extract(epoch FROM job.every_interval))
                           * extract(epoch FROM job.every_interval) * 1000000)::bigint
                   ELSE (SELECT max(r.schedule_slot) FROM runner.job_runs r
                         WHERE r.job_name = job.job_name AND r.schedule_slot <= now() - job.grace)
               END AS slot
    ) s
    CROSS JOIN LATERAL (
        SELECT count(*) AS runs,
               count(*) FILTER (WHERE runner.run_settled_v1(r.status)) AS done,
               min(r.id) FILTER (WHERE NOT runner.run_settled_v1(r.status))
                   AS open_run_id,
               string_agg(DISTINCT r.status, ', ')
                   FILTER (WHERE NOT runner.run_settled_v1(r.status))
                   AS open_statuses
        FROM runner.job_runs r
        WHERE r.job_name = job.job_name AND r.schedule_slot = s.slot
    ) due
    WHERE NOT job.paused
      AND job.retired_at IS NULL
      AND s.slot IS NOT NULL
      AND s.slot >= job.track_from
      AND (due.runs = 0 OR due.done < due.runs OR due.done < coalesce(cardinality(job.partitions), 1))
) AS a (kind, job_name, owner, run_id, detail, since);
