-- runner.alert_jobs: each job as the alert views read it (runner.alerts and its kinds,
-- sql/views/alert_*.sql): its owner, state and the thresholds its options set (stale_after;
-- grace, 300 seconds for a job row without one).
CREATE OR REPLACE VIEW runner.alert_jobs AS
SELECT j.job_name,
       j.options ->> 'owner' AS owner,
       j.paused,
       j.schedule_kind,
       j.every_interval,
       j.partitions,
       j.track_from,
       j.first_registered_at,
       j.retired_at,
       j.synced_at,
       j.in_code_at,
       CASE WHEN (j.options ->> 'stale_after_seconds') ~ '^[0-9]+([.][0-9]+)?$'
            THEN make_interval(secs => (j.options ->> 'stale_after_seconds')::float8)
       END AS stale_after,
       coalesce(
           CASE WHEN (j.options ->> 'grace_seconds') ~ '^[0-9]+([.][0-9]+)?$'
                THEN make_interval(secs => (j.options ->> 'grace_seconds')::float8)
           END,
           interval '300 seconds') AS grace
FROM runner.jobs j;
