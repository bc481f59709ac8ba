-- The slots of one schedule row with its cron already parsed (the six fields of
-- runner.cron_spec_v1; NULL for an every= row), from_ts < slot <= to_ts (unordered): what
-- runner.schedule_slots_v1 returns, for a caller that expands one row many times and parses
-- its cron once (runner.advance_watermarks_v3).
CREATE OR REPLACE FUNCTION runner.schedule_slots_v2(
    schedule_kind text, minutes bigint, hours bigint, days_of_month bigint, months bigint,
    days_of_week bigint, day_and boolean, every_interval interval, zone text,
    from_ts timestamptz, to_ts timestamptz)
RETURNS SETOF timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT c.slot
FROM runner.cron_slots_v2(minutes, hours, days_of_month, months, days_of_week, day_and,
                          zone, from_ts, to_ts) AS c(slot)
WHERE schedule_kind = 'cron'
UNION ALL
SELECT e.slot FROM runner.every_slots_v1(every_interval, from_ts, to_ts) AS e(slot)
WHERE schedule_kind = 'every'
$$;
