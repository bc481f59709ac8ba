-- runner.guard_track_from_v1(): a trigger on runner.jobs: track_from only moves earlier. A later
-- track_from takes the slots before it out of the gap scan: that is a decision about what
-- counts as missing, not a sync of the code's definition. The worker role may move it earlier
-- (a job's code names an older start: more is tracked); later only the schema owner may.

CREATE OR REPLACE FUNCTION runner.guard_track_from_v1() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NOT pg_has_role(current_user,
                       (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID),
                       'MEMBER') THEN
        RAISE EXCEPTION 'runner.jobs.track_from of job % may only move earlier: refused for role %',
            quote_literal(OLD.job_name), current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER jobs_track_from_earlier_only BEFORE UPDATE OF track_from ON runner.jobs FOR EACH ROW WHEN ((new.track_from > old.track_from)) EXECUTE FUNCTION runner.guard_track_from_v1();
