-- definition_conflict: live runners running two or more definitions of one job's schedule
-- (two code versions: a rollout under way, or an old version restarted during it; the
-- definitions each runner runs: runner.instances.definitions, written at registration). The
-- detail names each fingerprint with its schedule and the runners (host, pid) that run it,
-- and which one the schedule history holds. The history is never rewritten back and forth
-- meanwhile (runner.sync_schedule_v1, runner/history.py): it keeps the definition a live
-- runner runs, and a runner whose definition is not the history's re-asserts it once the
-- other version's runners are gone. Live: not stopped, heartbeat within the last 15 s, its
-- lock session connected (runner.runner_sessions_v1). Since: the newer of the two runners'
-- starts.
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_definition_conflict AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'definition_conflict',
           d.job_name,
           job.owner,
           NULL::bigint,
           format('job %s runs %s definitions on live runners: %s; the schedule history holds %s. '
                  'Finish the rollout (stop the runners of the old code) or roll it back',
                  quote_literal(d.job_name), count(DISTINCT d.fingerprint),
                  string_agg(d.fingerprint || ' (' || coalesce(d.schedule, '?') || ') on ' || d.runners, '; '
                             ORDER BY d.fingerprint),
                  coalesce((SELECT s.fingerprint || ' (' || runner.schedule_label_v1(
                                       s.schedule_kind, s.cron, s.every_interval, s.timezone, s.partitions,
                                       s.dynamic_partitions) || ')'
                            FROM runner.job_schedules s WHERE s.job_name = d.job_name
                            ORDER BY s.valid_from DESC LIMIT 1), 'nothing')),
           max(d.first_started)
    FROM (
        SELECT x.key AS job_name, x.value ->> 'fingerprint' AS fingerprint,
               min(x.value ->> 'schedule') AS schedule,
               string_agg(i.host || ' pid ' || i.pid, ', ' ORDER BY i.host, i.pid) AS runners,
               min(i.started_at) AS first_started
        FROM runner.instances i
        CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(i.definitions) = 'object'
                                           THEN i.definitions ELSE '{}'::jsonb END) AS x(key, value)
        WHERE i.stopped_at IS NULL AND i.heartbeat_at > (SELECT runner.ledger_now_v1()) - interval '15 seconds'
          AND i.backend_pid IN (SELECT runner.runner_sessions_v1())
          AND jsonb_typeof(x.value) = 'object'
        GROUP BY x.key, x.value ->> 'fingerprint'
    ) d
    LEFT JOIN runner.alert_jobs job ON job.job_name = d.job_name
    GROUP BY d.job_name, job.owner
    HAVING count(DISTINCT d.fingerprint) > 1
) AS a (kind, job_name, owner, run_id, detail, since);
