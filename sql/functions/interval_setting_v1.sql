-- runner.interval_setting_v1(name): the value of the custom setting `name` (e.g.
-- runner.job_not_in_code_after, set by ALTER DATABASE ... SET, ALTER ROLE ... SET or SET) as
-- an interval, or NULL when it is unset, empty, or not a usable interval: text that does
-- not parse ('banana', '6 hours; DROP ...'), zero or negative, or longer than 100 years
-- (an interval that large means "never", and adding it to a timestamp can leave the
-- timestamp range). NULL, never an error: a typo in a setting must not make the view that
-- reads it (runner.alerts) fail for every alert. The caller falls back to its default, and
-- runner.alerts reports the setting (kind bad_setting) when it is set but NULL here.
-- STABLE: the setting does not change within a statement. (An exception block is a
-- subtransaction: called once per statement by the view, not per row.)
CREATE OR REPLACE FUNCTION runner.interval_setting_v1(name text)
RETURNS interval
LANGUAGE plpgsql STABLE PARALLEL SAFE
AS $$
DECLARE
    raw text := nullif(btrim(current_setting(name, true)), '');
    value interval;
BEGIN
    IF raw IS NULL THEN
        RETURN NULL;
    END IF;
    BEGIN
        value := raw::interval;
    EXCEPTION WHEN data_exception THEN
        RETURN NULL;
    END;
    IF value <= interval '0' OR value > interval '100 years' THEN
        RETURN NULL;
    END IF;
    RETURN value;
END
$$;
