-- The slots of one schedule row (runner.jobs / runner.job_schedules: schedule_kind, cron,
-- every_interval, timezone) with from_ts < slot <= to_ts (unordered): the one SQL entry point
-- for slot expansion, used by the gap scan and the watermark advance.
CREATE OR REPLACE FUNCTION runner.schedule_slots_v1(
    schedule_kind text, cron text, every_interval interval, zone text,
    from_ts timestamptz, to_ts timestamptz)
RETURNS SETOF timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT c.slot FROM runner.cron_slots_v1(cron, zone, from_ts, to_ts) AS c(slot)
WHERE schedule_kind = 'cron'
UNION ALL
SELECT e.slot FROM runner.every_slots_v1(every_interval, from_ts, to_ts) AS e(slot)
WHERE schedule_kind = 'every'
$$;
