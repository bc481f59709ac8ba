-- runner.retire_job_v1 / runner.unretire_job_v1: `runner retire` and `runner unretire` in the
-- database. Like every operator action (see runner.rerun_v1): SECURITY DEFINER with a fixed
-- search_path, the change and its runner.requests row (action retire or unretire: the job
-- before and after, and how many of its runs are running and queued) in the caller's
-- transaction, db_user = session_user, refusals raised as P0001, EXECUTE for the operator
-- role only. The instant is the transaction's now(), never the caller's: a retirement cannot
-- be backdated (that would take slots that were due out of the gap scan).
--
-- Retire: runner.jobs.retired_at = now, and a runner.job_retirements row from now. After it
-- the job's slots are not expected (runner.tracked_spans_v1), the claim statements start no
-- slot, retry or rerun of it past that instant, and a runner whose code defines it refuses to
-- start. Unretire: retired_at back to NULL and the retirement row closed at now; slots from
-- now on are expected again, the ones in between never are. A job already in the state asked
-- for changes nothing and returns no row; an unknown job raises.
CREATE OR REPLACE FUNCTION runner.retire_job_v1(job_name text, who text, reason text)
RETURNS TABLE (request_id bigint, job text, retired_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := now();
    was timestamptz;
    running bigint;
    queued bigint;
    req bigint;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    SELECT j.retired_at INTO was FROM runner.jobs j
    WHERE j.job_name = retire_job_v1.job_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % no longer exists; nothing written', quote_literal(retire_job_v1.job_name);
    END IF;
    IF was IS NOT NULL THEN
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE r.status = 'running'),
           count(*) FILTER (WHERE r.status IN ('pending', 'failed'))
    INTO running, queued
    FROM runner.job_runs r
    WHERE r.job_name = retire_job_v1.job_name AND r.status IN ('running', 'pending', 'failed');

    req := runner.operator_request_v1('retire', retire_job_v1.job_name, who, reason, jsonb_build_object(
                'jobs', jsonb_build_array(jsonb_build_object(
                    'job_name', retire_job_v1.job_name,
                    'before', jsonb_build_object('retired_at', NULL),
                    'after', jsonb_build_object('retired_at', clock))),
                'runs_running', running,
                'runs_queued', queued));

    INSERT INTO runner.job_retirements (job_name, retired_from)
    VALUES (retire_job_v1.job_name, clock);

    RETURN QUERY
    UPDATE runner.jobs j SET retired_at = clock
    WHERE j.job_name = retire_job_v1.job_name
    RETURNING req, j.job_name, j.retired_at;
END
$$;
REVOKE ALL ON FUNCTION runner.retire_job_v1(text, text, text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION runner.unretire_job_v1(job_name text, who text, reason text)
RETURNS TABLE (request_id bigint, job text, retired_at timestamptz)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := now();
    was timestamptz;
    req bigint;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    SELECT j.retired_at INTO was FROM runner.jobs j
    WHERE j.job_name = unretire_job_v1.job_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job % no longer exists; nothing written', quote_literal(unretire_job_v1.job_name);
    END IF;
    IF was IS NULL THEN
        RETURN;
    END IF;

    req := runner.operator_request_v1('unretire', unretire_job_v1.job_name, who, reason, jsonb_build_object(
                'jobs', jsonb_build_array(jsonb_build_object(
                    'job_name', unretire_job_v1.job_name,
                    'before', jsonb_build_object('retired_at', was),
                    'after', jsonb_build_object('retired_at', NULL))),
                'not_expected', jsonb_build_object('from', was, 'until', clock)));

    UPDATE runner.job_retirements r SET retired_until = greatest(clock, r.retired_from)
    WHERE r.job_name = unretire_job_v1.job_name AND r.retired_until IS NULL;

    RETURN QUERY
    UPDATE runner.jobs j SET retired_at = NULL
    WHERE j.job_name = unretire_job_v1.job_name
    RETURNING req, j.job_name, j.retired_at;
END
$$;
REVOKE ALL ON FUNCTION runner.unretire_job_v1(text, text, text) FROM PUBLIC;
