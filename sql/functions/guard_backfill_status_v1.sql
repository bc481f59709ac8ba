-- runner.guard_backfill_status_v1(): a trigger on runner.backfills, the lane's transitions only.
-- The worker role updates a plan's state from its lane (sql/queries/backfill.sql): it pauses a
-- planned or running plan, and completes a running one. Every other change of status (resume,
-- cancel, back from completed or cancelled) is an operator's, made through the action
-- functions (which run as the owner), and refused here to every other role.

CREATE OR REPLACE FUNCTION runner.guard_backfill_status_v1() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
    AS $$
BEGIN
    IF NOT ((OLD.status IN ('planned', 'running') AND NEW.status = 'paused')
            OR (OLD.status = 'running' AND NEW.status = 'completed'))
       AND NOT pg_has_role(current_user,
                           (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID),
                           'MEMBER') THEN
        RAISE EXCEPTION 'backfill % may not go from % to % but by an operator''s action: refused for role %',
            OLD.id, OLD.status, NEW.status, current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER backfills_lane_transitions_only BEFORE UPDATE OF status ON runner.backfills FOR EACH ROW WHEN ((new.status IS DISTINCT FROM old.status)) EXECUTE FUNCTION runner.guard_backfill_status_v1();
