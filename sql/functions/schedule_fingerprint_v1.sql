-- runner.schedule_fingerprint_v1(kind, cron, every, timezone, partitions, dynamic): the
-- fingerprint of one schedule definition (the columns runner.job_schedules keeps), 12 hex
-- digits: equal definitions have equal fingerprints whatever the session's settings (the
-- interval is taken in seconds, the partitions as a JSON array), different ones differ
-- (md5; a collision would only merge two definitions' names in alerts and the audit).
-- The schedule history stamps each row with it (runner.job_schedules.fingerprint), every
-- runner records the fingerprint of each job it runs (runner.instances.definitions), and
-- runner.sync_schedule_v1 compares the two (revision 0026_history).
CREATE OR REPLACE FUNCTION runner.schedule_fingerprint_v1(
    schedule_kind text, cron text, every_interval interval, timezone text, partitions text[],
    dynamic_partitions boolean)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT left(pg_catalog.md5(pg_catalog.concat_ws('|', schedule_kind, coalesce(cron, ''),
                                                    coalesce(extract(epoch FROM every_interval)::text, ''),
                                                    timezone,
                                                    coalesce(pg_catalog.array_to_json(partitions)::text, 'null'),
                                                    coalesce(dynamic_partitions, false)::text)), 12)
$$;
