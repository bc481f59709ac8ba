-- A backfill's pause condition (runner.backfills.pause_when), evaluated as the condition
-- role: the one way the runner runs an operator's condition (runner/conditions.py).
--
-- SECURITY DEFINER, and owned by the condition role once sql/roles.sql ran (it makes that
-- NOLOGIN role, with SELECT only, the owner): inside, current_user is that role whatever
-- the caller's login, even a superuser's, and PostgreSQL refuses SET ROLE and SET SESSION
-- AUTHORIZATION within a security-definer function, so the condition cannot step back to
-- the caller's privileges. It refuses to run while its owner is a superuser, the runner
-- schema's owner or a member of a role that reaches the server's files, programs or other
-- sessions (as it is straight after `runner db upgrade`, before sql/roles.sql).
--
-- The transaction becomes read-only here; the caller sets the statement timeout, runs
-- this in a transaction (or savepoint) it rolls back, and has checked that the condition is
-- one statement returning one boolean column (runner/conditions.py describes it first).
-- The condition must return exactly one row (through a cursor: at most two rows are ever
-- fetched) of one
-- column, a boolean; NULL counts as false. The row may be at most 1 kB.
-- No SET search_path: the condition's names resolve as the caller's do. (The usual care of
-- a fixed search_path protects a powerful owner from its callers; this owner has no power
-- to lose.) Every catalog object and function the function itself names is qualified with
-- pg_catalog (as in runner.verify_query_v1), and the caller's search_path is put back right
-- after the condition ran: a caller cannot shadow pg_roles with a temporary table, or
-- pg_has_role with a function of its own, to make a too-powerful owner look harmless, and a
-- condition that changes search_path (set_config) cannot shadow what the checks after it
-- call (json_each, pg_locks, ...) to slip a wrong answer or a held lock past them.
--
-- Advisory locks (issue 28, point 3). PostgreSQL grants the advisory lock functions to
-- PUBLIC, and a grant to PUBLIC cannot be withheld from one role (no role leaves PUBLIC;
-- revoking them from PUBLIC would take them from the runners and the application), so a
-- condition can call them. The function refuses a condition that holds one when it is done:
-- after the condition's statement it lists its session's advisory locks (pg_locks) and,
-- when any is new (a transaction-level lock of pg_try_advisory_xact_lock is still held here,
-- before the caller's rollback would release it unseen; a session-level one of
-- pg_advisory_lock too), it fails with 'the condition took N advisory lock(s)', so the plan
-- pauses with that reason. While the condition ran, those keys were held by the runner's
-- condition session: a run whose claim met one is released uncounted, as when a runner
-- session holds it (sql/queries/ledger.sql key_holder), never failed for it. What this
-- cannot see: a session-level lock the condition itself released before it ended.
CREATE OR REPLACE FUNCTION runner.pause_condition_v1(condition text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
AS $$
DECLARE
    rows_of refcursor;
    got record;
    shape json;
    caller_path text := pg_catalog.current_setting('search_path');
    before text[];
    took bigint;
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_catalog.pg_roles r
        WHERE r.rolname = current_user
          AND (r.rolsuper OR r.rolbypassrls
               OR r.oid = (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'runner')
               OR pg_catalog.pg_has_role(r.oid, 'pg_execute_server_program', 'USAGE')
               OR pg_catalog.pg_has_role(r.oid, 'pg_read_server_files', 'USAGE')
               OR pg_catalog.pg_has_role(r.oid, 'pg_write_server_files', 'USAGE')
               OR pg_catalog.pg_has_role(r.oid, 'pg_signal_backend', 'USAGE'))
    ) THEN
        RAISE EXCEPTION 'pause conditions run as the condition role, and runner.pause_condition_v1 is owned by % (too powerful): apply sql/roles.sql, which creates the role and makes it the owner', current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    PERFORM pg_catalog.set_config('transaction_read_only', 'on', true);
    -- the advisory locks this session holds before the condition (the caller's plan lock)
    SELECT pg_catalog.array_agg(pg_catalog.concat_ws('/', l.classid, l.objid, l.objsubid, l.mode))
    INTO before
    FROM pg_catalog.pg_locks l
    WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid();
    -- a cursor: rows are fetched one at a time (two at most), never the whole result
    OPEN rows_of NO SCROLL FOR EXECUTE condition;
    FETCH rows_of INTO got;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the condition returned no rows (it must return exactly one)'
            USING ERRCODE = 'cardinality_violation';
    END IF;
    shape := pg_catalog.row_to_json(got);
    FETCH rows_of INTO got;
    IF FOUND THEN
        RAISE EXCEPTION 'the condition returned more than one row (it must return exactly one)'
            USING ERRCODE = 'cardinality_violation';
    END IF;
    CLOSE rows_of;
    -- the condition has run: the caller's search_path again, whatever it set
    PERFORM pg_catalog.set_config('search_path', caller_path, true);
    SELECT pg_catalog.count(*) INTO took
    FROM pg_catalog.pg_locks l
    WHERE l.locktype = 'advisory' AND l.pid = pg_catalog.pg_backend_pid()
      AND NOT coalesce(pg_catalog.concat_ws('/', l.classid, l.objid, l.objsubid, l.mode)
                       OPERATOR(pg_catalog.=) ANY (before), false);
    IF took OPERATOR(pg_catalog.>) 0 THEN
        RAISE EXCEPTION 'the condition took % advisory lock(s): a condition must only read (they are released)', took
            USING ERRCODE = 'prohibited_sql_statement_attempted';
    END IF;
    IF pg_catalog.octet_length(shape::text) OPERATOR(pg_catalog.>) 1024 THEN
        RAISE EXCEPTION 'the condition returned a row of % bytes (at most 1024: one boolean)',
            pg_catalog.octet_length(shape::text) USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF (SELECT pg_catalog.count(*) FROM pg_catalog.json_each(shape)) OPERATOR(pg_catalog.<>) 1 THEN
        RAISE EXCEPTION 'the condition returned % columns (it must return one boolean)',
            (SELECT pg_catalog.count(*) FROM pg_catalog.json_each(shape)) USING ERRCODE = 'datatype_mismatch';
    END IF;
    IF (SELECT pg_catalog.json_typeof(e.value) FROM pg_catalog.json_each(shape) AS e)
       NOT IN ('boolean', 'null') THEN
        RAISE EXCEPTION 'the condition returned a %, not a boolean',
            (SELECT pg_catalog.json_typeof(e.value) FROM pg_catalog.json_each(shape) AS e)
            USING ERRCODE = 'datatype_mismatch';
    END IF;
    RETURN coalesce((SELECT e.value::text::boolean FROM pg_catalog.json_each(shape) AS e), false);
END
$$;

-- only the roles sql/roles.sql names may call it (the condition role owns it there)
REVOKE ALL ON FUNCTION runner.pause_condition_v1(text) FROM PUBLIC;
