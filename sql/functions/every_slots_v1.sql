-- every= slots in SQL: the same slots as runner/schedule.py. Slots are the instants
-- k * every after the Unix epoch (1970-01-01T00:00:00Z) for every integer k, so every process
-- (and the gap scan) computes the same slots with no shared state. Returns every slot s with
-- from_ts < s <= to_ts, in no particular order. `every` is a positive interval of whole
-- microseconds; a day counts as 86,400 seconds (runner/schedule.py has no calendar months).
-- An interval with a months or years part, or not positive, gives no slots.
CREATE OR REPLACE FUNCTION runner.every_slots_v1(every interval, from_ts timestamptz, to_ts timestamptz)
RETURNS SETOF timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT timestamptz '1970-01-01 00:00:00+00'
       + ((k * s.step) / 1000000) * interval '1 second'
       + ((k * s.step) % 1000000) * interval '1 microsecond'
FROM (
    SELECT CASE WHEN extract(month FROM every) = 0 AND extract(year FROM every) = 0
                     AND every > interval '0'
                THEN (extract(epoch FROM every) * 1000000)::bigint
           END AS step
) AS s
CROSS JOIN LATERAL generate_series(
    floor(extract(epoch FROM from_ts) * 1000000 / s.step)::bigint + 1,
    floor(extract(epoch FROM to_ts) * 1000000 / s.step)::bigint) AS k
WHERE from_ts < to_ts
$$;
