-- runner.adopt_ledger_v1: `runner db adopt` in the database (issue 29, point 6). An operator
-- confirms that this copy of a ledger (runner.ledger_copy_v1) is now a ledger of its own: its
-- runners may run the plans, catch-up, retries and takeovers it holds from its source.
--
-- In one transaction: records the current identity in runner.ledger_identity (its row locked
-- first, so two adoptions are serialised and the second finds nothing to do), marks stopped
-- the instance rows whose lock session is not connected to this database (the source's
-- runners as dumped: they are not peers, and their running attempts become takeovers'), and
-- writes the runner.requests row (action adopt_ledger: the identity before and after, the
-- instances stopped, the plans running and the runs queued or running it lets go on).
-- A ledger that is not a copy is refused, nothing written. Like every operator action:
-- SECURITY DEFINER with a fixed search_path, db_user = session_user, refusals raised as
-- P0001, EXECUTE for the operator role only.
CREATE OR REPLACE FUNCTION runner.adopt_ledger_v1(who text, reason text)
RETURNS TABLE (request_id bigint, instances_stopped bigint)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    cur record;
    was record;
    stopped bigint;
    plans bigint;
    queued bigint;
    running bigint;
    req bigint;
BEGIN
    PERFORM runner.operator_who_v1(who, reason);
    SELECT i.* INTO was FROM runner.ledger_identity i FOR UPDATE;
    SELECT * INTO cur FROM runner.ledger_copy_v1();
    IF NOT cur.copied THEN
        RAISE EXCEPTION 'this ledger is not a copy: it was recorded in database % (oid %) of cluster %, where it is; nothing to adopt',
            cur.database_name, cur.database_oid, cur.system_identifier;
    END IF;

    WITH gone AS (
        UPDATE runner.instances i SET stopped_at = now()
        WHERE i.stopped_at IS NULL
          AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                          WHERE a.pid = i.backend_pid AND a.datname = current_database())
        RETURNING 1)
    SELECT count(*) INTO stopped FROM gone;
    SELECT count(*) INTO plans FROM runner.backfills b WHERE b.status IN ('planned', 'running');
    SELECT count(*) FILTER (WHERE r.status IN ('pending', 'failed')),
           count(*) FILTER (WHERE r.status = 'running')
    INTO queued, running
    FROM runner.job_runs r WHERE r.status IN ('pending', 'failed', 'running');

    req := runner.operator_request_v1('adopt_ledger', NULL, who, reason, jsonb_build_object(
                'before', CASE WHEN was.one IS NULL THEN NULL ELSE jsonb_build_object(
                    'system_identifier', was.system_identifier::text, 'database_oid', was.database_oid::bigint,
                    'database_name', was.database_name, 'recorded_at', was.recorded_at) END,
                'after', jsonb_build_object(
                    'system_identifier', cur.system_identifier::text, 'database_oid', cur.database_oid::bigint,
                    'database_name', cur.database_name),
                'instances_stopped', stopped,
                'plans_running', plans,
                'runs_queued', queued,
                'runs_running', running));

    INSERT INTO runner.ledger_identity AS i (one, system_identifier, database_oid, database_name, recorded_at,
                                             request_id)
    VALUES (true, cur.system_identifier, cur.database_oid, cur.database_name, now(), req)
    ON CONFLICT (one) DO UPDATE SET system_identifier = EXCLUDED.system_identifier,
        database_oid = EXCLUDED.database_oid, database_name = EXCLUDED.database_name,
        recorded_at = EXCLUDED.recorded_at, request_id = EXCLUDED.request_id;

    RETURN QUERY SELECT req, stopped;
END
$$;
REVOKE ALL ON FUNCTION runner.adopt_ledger_v1(text, text) FROM PUBLIC;
