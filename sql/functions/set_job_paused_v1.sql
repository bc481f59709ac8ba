-- runner.set_job_paused_v1: `runner pause` / `runner resume` in the database. Sets
-- runner.jobs.paused and writes the runner.requests row (action pause or resume: the job
-- before and after, and how many of its runs are running and queued), in the caller's
-- transaction. A job already in that state changes nothing and returns no row; an unknown
-- job raises. Like every operator action (see runner.rerun_v1): SECURITY DEFINER with a
-- fixed search_path, db_user = session_user, refusals raised as P0001, EXECUTE for the
-- operator role only. The pause history (runner.job_pauses) follows by its trigger.
CREATE OR REPLACE FUNCTION runner.set_job_paused_v1(job_name text, paused boolean, who text, reason text)
RETURNS TABLE (request_id bigint, job text, now_paused boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    was boolean;
    running bigint;
    queued bigint;
    req bigint;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    IF paused IS NULL THEN
        RAISE EXCEPTION 'paused must be true or false; nothing written';
    END IF;
    SELECT j.paused INTO was FROM runner.jobs j WHERE j.job_name = set_job_paused_v1.job_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % no longer exists; nothing written', quote_literal(set_job_paused_v1.job_name);
    END IF;
    IF was = paused THEN
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE r.status = 'running'),
           count(*) FILTER (WHERE r.status IN ('pending', 'failed'))
    INTO running, queued
    FROM runner.job_runs r
    WHERE r.job_name = set_job_paused_v1.job_name AND r.status IN ('running', 'pending', 'failed');

    req := runner.operator_request_v1(CASE WHEN paused THEN 'pause' ELSE 'resume' END, set_job_paused_v1.job_name,
                                      who, reason, jsonb_build_object(
                'jobs', jsonb_build_array(jsonb_build_object(
                    'job_name', set_job_paused_v1.job_name,
                    'before', jsonb_build_object('paused', was),
                    'after', jsonb_build_object('paused', paused))),
                'runs_running', running,
                'runs_queued', queued));

    RETURN QUERY
    UPDATE runner.jobs j SET paused = set_job_paused_v1.paused
    WHERE j.job_name = set_job_paused_v1.job_name
    RETURNING req, j.job_name, j.paused;
END
$$;
REVOKE ALL ON FUNCTION runner.set_job_paused_v1(text, boolean, text, text) FROM PUBLIC;
