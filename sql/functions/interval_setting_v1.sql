-- runner.interval_setting_v1(setting_name): the value of the custom setting `setting_name`
-- (e.g. runner.job_not_in_code_after, set by ALTER DATABASE ... SET, ALTER ROLE ... SET or
-- SET) as an interval, or NULL when it is unset, empty or unusable. Never an error: a typo
-- in a setting must not make the view that reads it (runner.alerts) fail for every alert;
-- the caller uses its default instead, and runner.alerts reports a setting that is set but
-- NULL here (kind bad_setting).
--
-- Usable: at most 100 characters, in one of two forms, case and blanks aside:
--   components "<number> <unit>" one after the other ('6 hours', '1 day 12 hours', '90 min',
--     '1h30m'), a number of at most 6 digits (and 6 decimals), a unit of
--     y yr yrs year years | mon mons month months | w week weeks | d day days |
--     h hr hrs hour hours | m min mins minute minutes | s sec secs second seconds;
--   or hours and minutes (and seconds) separated by colons ('06:30');
-- and the total above zero and at most 100 years (more means "never", and adding it to a
-- timestamp can leave the timestamp range). Anything else PostgreSQL's interval input would
-- take ('P1D', '@ 1 day', '1 day 06:00:00', signs) is not usable here: a cast would fail on
-- text that does not parse ('banana'), and catching that needs an exception block, a
-- subtransaction, which no parallel plan may run. So the text is parsed here, with bounded
-- numbers (no overflow), and the function is plain SQL, STABLE and PARALLEL SAFE.
CREATE OR REPLACE FUNCTION runner.interval_setting_v1(setting_name text)
RETURNS interval
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN t.total > interval '0' AND t.total <= interval '100 years' THEN t.total END
FROM (
    SELECT CASE
               WHEN length(r.v) > 100 THEN NULL
               WHEN r.v ~ '^[0-9]{1,6}:[0-5]?[0-9](:[0-5]?[0-9])?$'
                   THEN make_interval(hours => split_part(r.v, ':', 1)::integer,
                                      mins => split_part(r.v, ':', 2)::integer,
                                      secs => coalesce(nullif(split_part(r.v, ':', 3), ''), '0')::float8)
               WHEN r.v ~ ('^([0-9]{1,6}([.][0-9]{1,6})?\s*(years|year|yrs|yr|y|months|month|mons|mon|'
                           'weeks|week|w|days|day|d|hours|hour|hrs|hr|h|minutes|minute|mins|min|m|'
                           'seconds|second|secs|sec|s)\s*)+$')
                   THEN (SELECT sum(p[1]::float8 * CASE
                                    WHEN p[2] IN ('y', 'yr', 'yrs', 'year', 'years') THEN interval '1 year'
                                    WHEN p[2] IN ('mon', 'mons', 'month', 'months') THEN interval '1 month'
                                    WHEN p[2] IN ('w', 'week', 'weeks') THEN interval '7 days'
                                    WHEN p[2] IN ('d', 'day', 'days') THEN interval '1 day'
                                    WHEN p[2] IN ('h', 'hr', 'hrs', 'hour', 'hours') THEN interval '1 hour'
                                    WHEN p[2] IN ('m', 'min', 'mins', 'minute', 'minutes') THEN interval '1 minute'
                                    ELSE interval '1 second'
                                END)
                         FROM regexp_matches(r.v, '([0-9]{1,6}(?:[.][0-9]{1,6})?)\s*([a-z]+)', 'g') AS p)
           END AS total
    FROM (SELECT lower(btrim(current_setting(setting_name, true))) AS v) r
) t
$$;
