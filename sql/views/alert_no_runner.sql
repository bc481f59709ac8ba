-- no_runner: no live runner process while jobs are due (issue 30, point 1). Fires when no
-- runner is live (live: not stopped, heartbeat within the last 15 s, as job_not_in_code
-- counts them) for longer than runner.no_runner_after (an interval setting, 60 seconds
-- unless set, e.g. ALTER DATABASE app SET runner.no_runner_after = '5 minutes'; a value
-- runner.interval_setting_v1 cannot use counts as unset) since the newest heartbeat of any
-- runner (since: that heartbeat; no runner ever registered: the first job's
-- registration), while
-- work is due: a job that is neither paused nor retired has a slot of its schedule (as
-- runner.jobs holds it) after that and after its track_from, or a run is queued and due
-- (pending or failed, next attempt at or before now). One row for the whole ledger
-- (job_name and run_id NULL); the detail says since when, names one job that owes slots and
-- counts the runs that wait.
-- Cost: nothing below runs while a runner is live. With none, every= jobs are judged by
-- arithmetic (the latest whole multiple of the interval, as alert_late does); cron jobs only
-- when no every= job owes a slot, each by expanding its schedule over at most the last day
-- (runner.schedule_slots_v1), in job order, stopping at the first that owes one (so a daily
-- or weekly cron job counts for a day after its slot). Expanding every job's owed slots
-- (runner.expected_slots_v1) cost ~90 s for 1,000 minutely jobs down for three days.
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
          AND d.since + coalesce(runner.interval_setting_v1('runner.no_runner_after'),
                                 interval '60 seconds') < (SELECT runner.ledger_now_v1())
          AND NOT EXISTS (SELECT 1 FROM runner.instances i
                          WHERE i.stopped_at IS NULL AND i.heartbeat_at > (SELECT runner.ledger_now_v1()) - interval '15 seconds')
    ), owed AS MATERIALIZED (
        SELECT coalesce(
            (SELECT job.job_name FROM runner.alert_jobs job
             WHERE job.schedule_kind = 'every' AND NOT job.paused AND job.retired_at IS NULL
               AND job.every_interval > interval '0'
               AND to_timestamp(0) + interval '1 microsecond' * (
                       floor(extract(epoch FROM (SELECT runner.ledger_now_v1())) / extract(epoch FROM job.every_interval))
                       * extract(epoch FROM job.every_interval) * 1000000)::bigint
                   > greatest(down.since, job.track_from)
             ORDER BY job.job_name LIMIT 1),
            (SELECT job.job_name FROM runner.jobs job
             WHERE job.schedule_kind = 'cron' AND NOT job.paused AND job.retired_at IS NULL
               AND EXISTS (SELECT 1 FROM runner.schedule_slots_v1(
                               job.schedule_kind, job.cron, job.every_interval, job.timezone,
                               greatest(down.since, job.track_from, (SELECT runner.ledger_now_v1()) - interval '1 day'), (SELECT runner.ledger_now_v1())) s
                           WHERE s > greatest(down.since, job.track_from))
             ORDER BY job.job_name LIMIT 1)) AS example
        FROM down
    ), queued AS MATERIALIZED (
        SELECT (SELECT count(*) FROM (
                    SELECT 1 FROM runner.job_runs r
                    WHERE r.status IN ('pending', 'failed') AND r.next_attempt_at <= (SELECT runner.ledger_now_v1())
                    LIMIT 10000) q) AS runs
        FROM down
    )
    SELECT 'no_runner',
           NULL::text,
           NULL::text,
           NULL::bigint,
           format('no live runner since %s (longer than %s): %s; %s%s run(s) queued and due; start '
                  '`runner start` (runner.instances lists the runners)',
                  down.since, down.after,
                  CASE WHEN owed.example IS NULL THEN 'no job owes a slot since then'
                       ELSE format('job %s (and maybe others) owes slots since then', quote_literal(owed.example))
                  END,
                  CASE WHEN queued.runs >= 10000 THEN 'at least ' ELSE '' END, queued.runs),
           down.since
    FROM down, owed, queued
    WHERE owed.example IS NOT NULL OR queued.runs > 0
) AS a (kind, job_name, owner, run_id, detail, since);
