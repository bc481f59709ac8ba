-- Cron slots in SQL from a parsed cron: the same slots as runner/schedule.py
-- (Schedule.slots_between); tests/test_gap_sql.py keeps the two equal through
-- runner.cron_slots_v1, which parses and calls this.
--
-- runner.cron_slots_v2(minutes, hours, days_of_month, months, days_of_week, day_and, zone,
-- from_ts, to_ts): the cron slots of a parsed cron (the six fields of runner.cron_spec_v1,
-- sql/functions/cron_slots_v1.sql), every slot s with from_ts < s <= to_ts, once each, in no
-- particular order (add ORDER BY when it matters).
-- The rules (see runner/schedule.py):
--
--   * the cron matches LOCAL wall time w (whole minutes) in the IANA zone;
--   * day-of-month and day-of-week combine by the Vixie rule: if either field starts with '*'
--     a day must match both, otherwise a day matching either fires;
--   * w becomes the instant of w with Python's fold=0: a local time that does not exist fires
--     once, shifted forward by the gap (02:30 -> 03:30 EDT); a local time that occurs twice
--     fires once, at its FIRST occurrence (01:30 EDT, never 01:30 EST); two local times that
--     land on one instant are one slot.
--
-- PostgreSQL's own `timestamp AT TIME ZONE zone` agrees for times that do not exist (it reads
-- them with the offset in force before the change) but reads a repeated time as its SECOND
-- occurrence. So the conversion is done here from the zone's offsets: for each local day d,
-- oa is the UTC offset at the instant d - 17h and ob the one at d + 41h (d read as UTC). Any
-- instant a wall time of day d can denote lies between them (offsets are within +-16h). When
-- oa = ob, no offset change touches the day and w - oa is the slot (arithmetic only, no zone
-- lookup per slot). Otherwise exactly one change lies in between, oa is the offset before it,
-- and the slot is w - oa if that instant still has offset oa (w's first or only occurrence),
-- else PostgreSQL's reading of w (its only occurrence after the change, or -- for a time that
-- does not exist -- w read with oa, which is Python's fold=0 too).
-- This assumes two offset changes of a zone are more than 58 hours apart; in the tz database
-- from 1900 to 2040 the closest pair is about 95 hours apart (Africa/Freetown, 1939).
-- runner/schedule.py makes the same kind of assumption (12 hours).
--
-- The local range examined is narrowed with the zone's offsets at from_ts - 24h and to_ts
-- when the range spans at most 48 hours (so that a tail of a few minutes costs a few minutes
-- of wall time, not days), and widened by 16 hours each side otherwise.
--
-- Both sides must read the same tz database: PostgreSQL's (system tzdata when built
-- --with-system-tzdata, as Debian's packages are) and Python's zoneinfo (system tzdata, else
-- the tzdata package). A zone whose rules differ between the two gives different slots.
-- Some names PostgreSQL reads otherwise than zoneinfo whatever the data: timezone(name, t)
-- tries the time zone abbreviations first, so 'CET', 'EET', 'MET', 'WET', 'EST', 'MST' and
-- 'HST' are fixed offsets here, and it applies the leap seconds of right/* zones. The runner
-- refuses those names when a job is registered (runner/schedule.py, tests/test_zones.py).

-- The UTC offset of zone at instant t, as an interval (local wall time minus UTC).
CREATE OR REPLACE FUNCTION runner.zone_offset_v1(zone text, t timestamptz)
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT timezone(zone, t) - timezone('UTC', t) $$;

CREATE OR REPLACE FUNCTION runner.cron_slots_v2(
    minutes bigint, hours bigint, days_of_month bigint, months bigint, days_of_week bigint,
    day_and boolean, zone text, from_ts timestamptz, to_ts timestamptz)
RETURNS SETOF timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
-- (OFFSET 0 keeps each subquery's per-day or per-call values from being recomputed per slot.)
SELECT DISTINCT x.slot
FROM (
    SELECT CASE WHEN z.oa = z.ob
                  OR runner.zone_offset_v1(zone, z.base + t.tod) = z.oa THEN z.base + t.tod
                ELSE timezone(zone, z.day + t.tod)
           END AS slot
    FROM (
        -- each firing local day that can hold a slot, with the offsets around it
        SELECT d.day, d.lo_tod, d.hi_tod, p.hours, p.minutes, o.oa, o.ob,
               timezone('UTC', d.day - o.oa) AS base
        FROM (SELECT cron_slots_v2.minutes, cron_slots_v2.hours, cron_slots_v2.days_of_month,
                     cron_slots_v2.months, cron_slots_v2.days_of_week, cron_slots_v2.day_and) AS s
        CROSS JOIN LATERAL (
            SELECT ARRAY(SELECT h * interval '1 hour' FROM generate_series(0, 23) AS h
                         WHERE (s.hours >> h) & 1 = 1) AS hours,
                   ARRAY(SELECT mi * interval '1 minute' FROM generate_series(0, 59) AS mi
                         WHERE (s.minutes >> mi) & 1 = 1) AS minutes,
                   -- the local wall-time range [lo, hi] that can hold a slot in (from_ts, to_ts]
                   CASE WHEN to_ts - from_ts <= interval '48 hours'
                        THEN timezone('UTC', from_ts)
                             + least(runner.zone_offset_v1(zone, from_ts - interval '24 hours'),
                                     runner.zone_offset_v1(zone, to_ts))
                        ELSE timezone('UTC', from_ts) - interval '16 hours' END AS lo,
                   CASE WHEN to_ts - from_ts <= interval '48 hours'
                        THEN timezone('UTC', to_ts)
                             + greatest(runner.zone_offset_v1(zone, from_ts - interval '24 hours'),
                                        runner.zone_offset_v1(zone, to_ts))
                        ELSE timezone('UTC', to_ts) + interval '16 hours' END AS hi
            WHERE from_ts < to_ts
            OFFSET 0
        ) AS p
        CROSS JOIN LATERAL (
            SELECT dd.day, p.lo - dd.day AS lo_tod, p.hi - dd.day AS hi_tod
            FROM (SELECT (p.lo::date + i)::timestamp AS day,
                         extract(day FROM p.lo::date + i)::integer AS dom,
                         extract(month FROM p.lo::date + i)::integer AS month,
                         extract(dow FROM p.lo::date + i)::integer AS dow
                  FROM generate_series(0, p.hi::date - p.lo::date) AS i) AS dd
            WHERE (s.months >> dd.month) & 1 = 1
              AND CASE WHEN s.day_and
                       THEN (s.days_of_month >> dd.dom) & 1 = 1 AND (s.days_of_week >> dd.dow) & 1 = 1
                       ELSE (s.days_of_month >> dd.dom) & 1 = 1 OR (s.days_of_week >> dd.dow) & 1 = 1
                  END
        ) AS d
        CROSS JOIN LATERAL (
            SELECT runner.zone_offset_v1(zone, timezone('UTC', d.day - interval '17 hours')) AS oa,
                   runner.zone_offset_v1(zone, timezone('UTC', d.day + interval '41 hours')) AS ob
            OFFSET 0
        ) AS o
        OFFSET 0
    ) AS z
    CROSS JOIN LATERAL (
        SELECT hm.tod
        FROM unnest(z.hours) AS h(hour_tod)
        CROSS JOIN LATERAL (
            SELECT h.hour_tod + mi AS tod FROM unnest(z.minutes) AS mi
        ) AS hm
        WHERE h.hour_tod + interval '59 minutes' >= z.lo_tod AND h.hour_tod <= z.hi_tod
          AND hm.tod BETWEEN z.lo_tod AND z.hi_tod
    ) AS t
    OFFSET 0
) AS x
WHERE x.slot > from_ts AND x.slot <= to_ts
$$;
