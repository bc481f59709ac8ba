-- runner.record_pause_v1(): a trigger on runner.jobs that keeps runner.job_pauses, the spans in
-- which a job was paused (paused_until NULL while the pause lasts), so that no writer of
-- `paused` can forget them. Slots due while a job was paused are not late slots for the
-- misfire duty to decide; they stay in the gap scan for an operator.

CREATE OR REPLACE FUNCTION runner.record_pause_v1() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NEW.paused AND (TG_OP = 'INSERT' OR NOT OLD.paused) THEN
        INSERT INTO runner.job_pauses (job_name, paused_from)
        VALUES (NEW.job_name, clock_timestamp())
        ON CONFLICT DO NOTHING;
    ELSIF TG_OP = 'UPDATE' AND OLD.paused AND NOT NEW.paused THEN
        UPDATE runner.job_pauses SET paused_until = clock_timestamp()
        WHERE job_name = NEW.job_name AND paused_until IS NULL;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER jobs_record_pause AFTER INSERT OR UPDATE OF paused ON runner.jobs FOR EACH ROW EXECUTE FUNCTION runner.record_pause_v1();
REVOKE ALL ON FUNCTION runner.record_pause_v1() FROM PUBLIC;
