-- runner.schedule_label_v1(...): the same definition in words, for alerts and logs
-- ("every 3 seconds UTC", "cron 0 2 * * * Asia/Seoul [a, b]").
CREATE OR REPLACE FUNCTION runner.schedule_label_v1(
    schedule_kind text, cron text, every_interval interval, timezone text, partitions text[],
    dynamic_partitions boolean)
RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT CASE WHEN schedule_kind = 'every' THEN 'every ' || every_interval::text
                ELSE 'cron ' || coalesce(cron, '?') END
           || ' ' || coalesce(timezone, 'UTC')
           || CASE WHEN coalesce(dynamic_partitions, false) THEN ' (dynamic partitions)'
                   WHEN partitions IS NOT NULL THEN ' [' || array_to_string(partitions, ', ') || ']'
                   ELSE '' END
$$;
