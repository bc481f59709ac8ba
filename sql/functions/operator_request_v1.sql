-- runner.operator_request_v1: what every audited operator action shares (rerun_v2,
-- rerun_runs_v1, create_backfill_v2, the plan actions of backfill_actions_v1, decide_runs_v1,
-- set_job_paused_v1, retire_job_v1, set_lane_v1, adopt_ledger_v1): its runner.requests row.
--
-- runner.operator_who_v1(who, reason) refuses an empty who (--by) or reason (P0001, one
-- line, nothing written); an action calls it first, before it reads or locks anything.
-- runner.operator_request_v1(action, job_name, who, reason, touched) checks the same, writes
-- the request row (who and reason trimmed; db_user = session_user, the login that called,
-- which the caller cannot choose, whatever role the action runs as) and returns its id.
--
-- Neither is SECURITY DEFINER: they run as their caller, the action functions, which run as
-- the schema owner. A runner role may call them (sql/roles.sql grants every such function),
-- but with its own privileges: none holds INSERT on runner.requests, so no login writes a
-- request row but through an action.
CREATE OR REPLACE FUNCTION runner.operator_who_v1(who text, reason text)
RETURNS void
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF coalesce(btrim(who), '') = '' OR coalesce(btrim(reason), '') = '' THEN
        RAISE EXCEPTION 'who (--by) and --reason must not be empty; nothing written';
    END IF;
END
$$;
REVOKE ALL ON FUNCTION runner.operator_who_v1(text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION runner.operator_request_v1(
    action text, job_name text, who text, reason text, touched jsonb)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    req bigint;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    INSERT INTO runner.requests AS q (action, job_name, who, reason, db_user, touched)
    VALUES (action, job_name, btrim(who), btrim(reason), session_user, touched)
    RETURNING q.id INTO req;
    RETURN req;
END
$$;
REVOKE ALL ON FUNCTION runner.operator_request_v1(text, text, text, text, jsonb) FROM PUBLIC;
