-- slow: over 2 x the p95 of the job's last 100 successful durations
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_slow AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'slow',
           job.job_name,
           job.owner,
           c.id,
           format('run %s, slot %s%s: %s %ss, over 2 x the p95 (%ss) of the last %s successful runs',
                  c.id, c.schedule_slot,
                  CASE WHEN c.partition_key <> '' THEN format(', partition %L', c.partition_key) ELSE '' END,
                  CASE c.status WHEN 'running' THEN 'running for' ELSE 'took' END,
                  round(extract(epoch FROM c.duration), 1), round(p.p95::numeric, 1), p.n),
           c.started_at + p.threshold
    FROM runner.alert_jobs job
    CROSS JOIN LATERAL (
        SELECT d.p95, d.n, greatest(make_interval(secs => 2 * d.p95), interval '1 second') AS threshold
        FROM (
            SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY last.seconds) AS p95, count(*) AS n
            FROM (
                SELECT extract(epoch FROM s.finished_at - s.started_at)::float8 AS seconds
                FROM runner.job_runs s
                WHERE s.job_name = job.job_name AND s.status = 'succeeded'
                  AND s.started_at IS NOT NULL AND s.finished_at IS NOT NULL
                ORDER BY s.finished_at DESC
                LIMIT 100
            ) last
        ) d
        WHERE d.n >= 20
    ) p
    CROSS JOIN LATERAL (
        -- the longest success of the last 24 hours, from the index alone (job_runs_succeeded
        -- covers started_at): only a job with one over the threshold reads those runs' rows
        -- (revision 0016_health; before, every job fetched every success of its last day)
        SELECT max(s.finished_at - s.started_at) AS longest
        FROM runner.job_runs s
        WHERE s.job_name = job.job_name AND s.status = 'succeeded'
          AND s.finished_at >= (SELECT runner.ledger_now_v1()) - interval '24 hours'
    ) day
    JOIN LATERAL (
        SELECT r.id, r.schedule_slot, r.partition_key, r.status, r.started_at,
               (SELECT runner.ledger_now_v1()) - r.started_at AS duration
        FROM runner.job_runs r
        WHERE r.job_name = job.job_name AND r.status = 'running'
        UNION ALL
        SELECT r.id, r.schedule_slot, r.partition_key, r.status, r.started_at,
               r.finished_at - r.started_at
        FROM runner.job_runs r
        WHERE r.job_name = job.job_name AND r.status = 'succeeded'
          AND r.finished_at >= (SELECT runner.ledger_now_v1()) - interval '24 hours'
          AND day.longest > p.threshold
    ) c ON c.duration > p.threshold
) AS a (kind, job_name, owner, run_id, detail, since);
