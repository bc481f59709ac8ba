-- no_runner: no live runner process while jobs are due (issue 30, point 1). Fires when no
-- runner is live (live: not stopped, heartbeat within the last 15 s, as job_not_in_code
-- counts them) for longer than runner.no_runner_after (an interval setting, 60 seconds
-- unless set, e.g. ALTER DATABASE app SET runner.no_runner_after = '5 minutes'; a value
-- runner.interval_setting_v1 cannot use counts as unset) since the newest heartbeat of any
-- runner (since: that heartbeat; no runner ever registered: the first job's
-- registration), while
-- work is due: a job that is neither paused nor retired owes a slot since then
-- (runner.expected_slots_v1, looked at over the last 7 days at most), or a run is queued and
-- due (pending or failed, next attempt at or before now). One row for the whole ledger
-- (job_name and run_id NULL); the detail says since when, how many jobs owe slots and how
-- many runs wait. Nothing is expanded while a runner is live.
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_no_runner AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    WITH down AS MATERIALIZED (
        SELECT d.since,
               coalesce(runner.interval_setting_v1('runner.no_runner_after'), interval '60 seconds') AS after
        FROM (SELECT coalesce((SELECT max(i.heartbeat_at) FROM runner.instances i),
                              (SELECT min(j.first_registered_at) FROM runner.jobs j)) AS since) d
        WHERE d.since IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM runner.instances i
                          WHERE i.stopped_at IS NULL AND i.heartbeat_at > now() - interval '15 seconds')
    ), owed AS MATERIALIZED (
        SELECT count(*) AS jobs
        FROM down
        CROSS JOIN runner.alert_jobs job
        WHERE down.since + down.after < now()
          AND NOT job.paused AND job.retired_at IS NULL
          AND EXISTS (SELECT 1
                      FROM runner.expected_slots_v1(job.job_name,
                                                    greatest(down.since, now() - interval '7 days'),
                                                    now()) e
                      WHERE NOT e.paused)
    ), queued AS MATERIALIZED (
        SELECT count(*) AS runs
        FROM down
        CROSS JOIN LATERAL (
            SELECT 1 FROM runner.job_runs r
            WHERE r.status IN ('pending', 'failed') AND r.next_attempt_at <= now()
            LIMIT 10000
        ) r
        WHERE down.since + down.after < now()
    )
    SELECT 'no_runner',
           NULL::text,
           NULL::text,
           NULL::bigint,
           format('no live runner since %s (longer than %s): %s job(s) owe slots since then, %s%s run(s) '
                  'queued and due; start `runner start` (runner.instances lists the runners)',
                  down.since, down.after, owed.jobs,
                  CASE WHEN queued.runs >= 10000 THEN 'at least ' ELSE '' END, queued.runs),
           down.since
    FROM down, owed, queued
    WHERE down.since + down.after < now()
      AND (owed.jobs > 0 OR queued.runs > 0)
) AS a (kind, job_name, owner, run_id, detail, since);
