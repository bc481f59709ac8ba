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
-- to lose.) The owner check itself names every catalog object with its schema, so a caller
-- cannot shadow pg_roles with a temporary table, or pg_has_role with a function of its own,
-- to make a too-powerful owner look harmless.
CREATE OR REPLACE FUNCTION runner.pause_condition_v1(condition text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER
AS $$
DECLARE
    rows_of refcursor;
    got record;
    shape json;
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
    PERFORM set_config('transaction_read_only', 'on', true);
    -- a cursor: rows are fetched one at a time (two at most), never the whole result
    OPEN rows_of NO SCROLL FOR EXECUTE condition;
    FETCH rows_of INTO got;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'the condition returned no rows (it must return exactly one)'
            USING ERRCODE = 'cardinality_violation';
    END IF;
    shape := row_to_json(got);
    FETCH rows_of INTO got;
    IF FOUND THEN
        RAISE EXCEPTION 'the condition returned more than one row (it must return exactly one)'
            USING ERRCODE = 'cardinality_violation';
    END IF;
    CLOSE rows_of;
    IF octet_length(shape::text) > 1024 THEN
        RAISE EXCEPTION 'the condition returned a row of % bytes (at most 1024: one boolean)',
            octet_length(shape::text) USING ERRCODE = 'program_limit_exceeded';
    END IF;
    IF (SELECT count(*) FROM json_each(shape)) <> 1 THEN
        RAISE EXCEPTION 'the condition returned % columns (it must return one boolean)',
            (SELECT count(*) FROM json_each(shape)) USING ERRCODE = 'datatype_mismatch';
    END IF;
    IF (SELECT json_typeof(value) FROM json_each(shape)) NOT IN ('boolean', 'null') THEN
        RAISE EXCEPTION 'the condition returned a %, not a boolean',
            (SELECT json_typeof(value) FROM json_each(shape)) USING ERRCODE = 'datatype_mismatch';
    END IF;
    RETURN coalesce((SELECT value::text::boolean FROM json_each(shape)), false);
END
$$;

-- only the roles sql/roles.sql names may call it (the condition role owns it there)
REVOKE ALL ON FUNCTION runner.pause_condition_v1(text) FROM PUBLIC;
