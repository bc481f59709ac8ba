-- Cron slots in SQL: the same slots as runner/schedule.py (Schedule.slots_between), so that
-- the gap scan (sql/views/missing_slots.sql) can expect slots with no runner alive. A property
-- test (tests/test_gap_sql.py) keeps the two equal across zones and real DST transitions.
--
-- runner.cron_spec_v1(cron) parses the 5-field form that runner.jobs.cron and
-- runner.job_schedules.cron hold (Schedule.cron: aliases such as @daily already expanded,
-- fields separated by one space, month and weekday names kept as written, in any case). It
-- also accepts the aliases and tabs, and raises on anything runner/schedule.py rejects by its
-- own grammar (croniter's extra validation is not repeated: the stored form was validated).
--
-- runner.cron_slots_v1(cron, zone, from_ts, to_ts) returns every slot s with
-- from_ts < s <= to_ts, once each, in no particular order (add ORDER BY when it matters): the
-- cron parsed here, expanded by runner.cron_slots_v2 (sql/functions/cron_slots_v2.sql, which
-- states the rules). A caller that expands one cron many times (the watermark advance,
-- runner.advance_watermarks_v3) parses it once and calls runner.cron_slots_v2 itself.

CREATE OR REPLACE FUNCTION runner.cron_spec_v1(
    cron text,
    OUT minutes bigint, OUT hours bigint, OUT days_of_month bigint, OUT months bigint,
    OUT days_of_week bigint, OUT day_and boolean)
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
-- Each set is a bit mask: bit n is set when the value n is in the field's set (days of the
-- week 0 = Sunday .. 6 = Saturday). day_and is the Vixie rule (see above). Bit masks and plain
-- plpgsql expressions keep a parse near 20 microseconds: the gap scan parses once per job.
DECLARE
    expr text := btrim(cron, E' \t\n\r\f\x0b');
    fields text[];
    lows constant integer[] := ARRAY[0, 0, 1, 1, 0];
    highs constant integer[] := ARRAY[59, 23, 31, 12, 7];
    fnames constant text[] := ARRAY['minute', 'hour', 'day-of-month', 'month', 'day-of-week'];
    month_names constant text[] := ARRAY['JAN', 'FEB', 'MAR', 'APR', 'MAY', 'JUN', 'JUL', 'AUG',
                                          'SEP', 'OCT', 'NOV', 'DEC'];
    dow_names constant text[] := ARRAY['SUN', 'MON', 'TUE', 'WED', 'THU', 'FRI', 'SAT'];
    bits bigint;
    item text;
    m text[];
    tok text;
    v numeric;
    step integer;
    lo integer;
    hi integer;
    i integer;
    j integer;
    k integer;
BEGIN
    IF left(expr, 1) = '@' THEN
        expr := CASE lower(expr)
                    WHEN '@yearly' THEN '0 0 1 1 *'
                    WHEN '@annually' THEN '0 0 1 1 *'
                    WHEN '@monthly' THEN '0 0 1 * *'
                    WHEN '@weekly' THEN '0 0 * * 0'
                    WHEN '@daily' THEN '0 0 * * *'
                    WHEN '@midnight' THEN '0 0 * * *'
                    WHEN '@hourly' THEN '0 * * * *'
                END;
        IF expr IS NULL THEN
            RAISE EXCEPTION 'invalid cron: unknown alias %', quote_literal(cron)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    fields := regexp_split_to_array(expr, '[ \t]+');
    IF expr = '' OR cardinality(fields) <> 5 THEN
        RAISE EXCEPTION 'invalid cron: % does not have 5 fields', quote_literal(cron)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1..5 LOOP
        bits := 0;
        FOREACH item IN ARRAY string_to_array(fields[i], ',') LOOP
            m := regexp_match(item, '^(?:(\*)|([0-9A-Za-z]+)(?:-([0-9A-Za-z]+))?)(?:/([0-9]+))?$');
            IF m IS NULL THEN
                RAISE EXCEPTION 'invalid cron: % field: cannot read %', fnames[i], quote_literal(item)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            step := CASE WHEN m[4] IS NULL THEN 1 ELSE least(m[4]::numeric, 1000)::integer END;
            IF step = 0 THEN
                RAISE EXCEPTION 'invalid cron: % field: step 0 in %', fnames[i], quote_literal(item)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            IF m[1] IS NOT NULL THEN
                lo := lows[i];
                hi := CASE WHEN i = 5 THEN 6 ELSE highs[i] END;
            ELSE
                FOR j IN 2..3 LOOP
                    tok := m[j];
                    CONTINUE WHEN tok IS NULL;
                    IF tok ~ '^[0-9]+$' THEN
                        v := tok::numeric;
                    ELSIF i = 4 AND array_position(month_names, upper(tok)) IS NOT NULL THEN
                        v := array_position(month_names, upper(tok));
                    ELSIF i = 5 AND array_position(dow_names, upper(tok)) IS NOT NULL THEN
                        v := array_position(dow_names, upper(tok)) - 1;
                    ELSE
                        RAISE EXCEPTION 'invalid cron: % field: % is not a number or name',
                            fnames[i], quote_literal(tok) USING ERRCODE = 'invalid_parameter_value';
                    END IF;
                    IF v < lows[i] OR v > highs[i] THEN
                        RAISE EXCEPTION 'invalid cron: % field: % is outside %-%',
                            fnames[i], v, lows[i], highs[i] USING ERRCODE = 'invalid_parameter_value';
                    END IF;
                    IF j = 2 THEN lo := v; ELSE hi := v; END IF;
                END LOOP;
                IF m[3] IS NOT NULL THEN
                    IF hi < lo THEN
                        RAISE EXCEPTION 'invalid cron: % field: range % runs backwards',
                            fnames[i], quote_literal(item) USING ERRCODE = 'invalid_parameter_value';
                    END IF;
                ELSIF m[4] IS NULL THEN
                    hi := lo;
                ELSE
                    hi := CASE WHEN i = 5 THEN 6 ELSE highs[i] END;  -- a/n means a-max/n
                    IF hi < lo THEN  -- '7/n': day-of-week a/n stops at Saturday, as in Python
                        RAISE EXCEPTION 'invalid cron: % field: % starts past Saturday',
                            fnames[i], quote_literal(item) USING ERRCODE = 'invalid_parameter_value';
                    END IF;
                END IF;
            END IF;
            IF step = 1 AND lo <= hi THEN
                bits := bits | (((1::bigint << (hi - lo + 1)) - 1) << lo);
            ELSE
                k := lo;
                WHILE k <= hi LOOP
                    bits := bits | (1::bigint << k);
                    k := k + step;
                END LOOP;
            END IF;
        END LOOP;
        CASE i
            WHEN 1 THEN minutes := bits;
            WHEN 2 THEN hours := bits;
            WHEN 3 THEN days_of_month := bits;
            WHEN 4 THEN months := bits;
            ELSE days_of_week := (bits & 127) | ((bits >> 7) & 1);  -- 7 is Sunday
        END CASE;
    END LOOP;
    day_and := left(fields[3], 1) = '*' OR left(fields[5], 1) = '*';
END
$$;

CREATE OR REPLACE FUNCTION runner.cron_slots_v1(
    cron text, zone text, from_ts timestamptz, to_ts timestamptz)
RETURNS SETOF timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT c.slot
FROM runner.cron_spec_v1(cron) AS s
CROSS JOIN LATERAL runner.cron_slots_v2(s.minutes, s.hours, s.days_of_month, s.months,
                                        s.days_of_week, s.day_and, zone, from_ts, to_ts) AS c(slot)
$$;
