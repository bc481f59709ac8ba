-- Revision 0007_security: Security: audited action functions, least-privilege roles, the condition role.
--
-- What a role may write is no longer a list of columns (sql/roles.sql): column grants cannot
-- say "only a running run, at its fence" or "only with its runner.requests row". So:
--
-- * every operator action is a database function (sql/functions/rerun_v1.sql,
--   set_job_paused_v1.sql, decide_runs_v1.sql, create_backfill_v1.sql,
--   backfill_actions_v1.sql, applied right after this file): SECURITY DEFINER with a fixed
--   search_path, it checks the transition, writes the change and its runner.requests row in
--   one transaction, and records db_user = session_user. The operator role holds EXECUTE on
--   them and no INSERT or UPDATE on any ledger table;
-- * the worker's state transitions go through fence-checked functions of the same kind:
--   runner.start_attempts_v1 (revision 0006, now SECURITY DEFINER), runner.finish_attempts_v1
--   (the outcome statement, moved into a function) and runner.record_replay_plan_v1 (the one
--   kind of plan a runner makes). Its remaining column grants are listed in sql/roles.sql;
-- * two transitions that direct writes by the worker could still make are refused below by
--   triggers, to every role but the owner of the table (the migrations' role; the functions
--   above run as it).

-- == runner.jobs.track_from only moves earlier ================================================
-- A later track_from takes the slots before it out of the gap scan: that is a decision about
-- what counts as missing, not a sync of the code's definition. The worker role may move it
-- earlier (a job's code names an older start: more is tracked); later only the schema owner
-- may (UPDATE runner.jobs SET track_from = ... as that role). sync_job keeps the earlier of the
-- stored and the code's value for the same reason.
CREATE FUNCTION runner.guard_track_from_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
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

CREATE TRIGGER jobs_track_from_earlier_only
    BEFORE UPDATE OF track_from ON runner.jobs
    FOR EACH ROW WHEN (NEW.track_from > OLD.track_from)
    EXECUTE FUNCTION runner.guard_track_from_v1();

-- == runner.backfills: the lane's transitions only ============================================
-- The worker role updates a plan's state from its lane (sql/queries/backfill.sql): it pauses
-- a planned or running plan, and completes a running one. Every other change of status
-- (resume, cancel, back from completed or cancelled) is an operator's, made through the
-- action functions (which run as the owner).
CREATE FUNCTION runner.guard_backfill_status_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
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

CREATE TRIGGER backfills_lane_transitions_only
    BEFORE UPDATE OF status ON runner.backfills
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION runner.guard_backfill_status_v1();
