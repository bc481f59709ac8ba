-- One SQL query of a backfill's verification kinds (runner/verification.py), evaluated as
-- the condition role: the one way the runner runs a job's verification SQL.
--
-- The same rules as runner.pause_condition_v1 (sql/functions/pause_condition_v1.sql), whose
-- owner check this repeats: SECURITY DEFINER, owned by the condition role once sql/roles.sql
-- ran, refusing to run while its owner could do more than read; the transaction becomes
-- read-only here; the caller sets the statement timeout, runs this in a transaction it
-- rolls back, on a connection of its own, and checks afterwards that no advisory lock
-- survived. The query is one SELECT (a cursor refuses anything else) with the positional
-- parameters $1 window start, $2 window end, $3 partition and $4 keys (text[]; the sample
-- of sample_keys), which the runner rewrote from %(window_start)s, %(window_end)s,
-- %(partition)s and %(keys)s. At most max_rows + 1 rows are fetched (the caller learns
-- that there were more), each returned as a JSON array of its column values, in column
-- order; a row over 4 kB is refused.
CREATE OR REPLACE FUNCTION runner.verify_query_v1(
    query text, window_start timestamptz, window_end timestamptz, partition_key text, keys text[],
    max_rows integer)
RETURNS SETOF text
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
AS $$
DECLARE
    rows_of refcursor;
    got record;
    shape text;
    fetched integer := 0;
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
        RAISE EXCEPTION 'verification SQL runs as the condition role, and runner.verify_query_v1 is owned by % (too powerful): apply sql/roles.sql, which creates the role and makes it the owner', current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF query IS NULL OR max_rows IS NULL OR max_rows < 0 THEN
        RAISE EXCEPTION 'a query and max_rows >= 0 are required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_catalog.set_config('transaction_read_only', 'on', true);
    OPEN rows_of NO SCROLL FOR EXECUTE query USING window_start, window_end, partition_key, keys;
    LOOP
        FETCH rows_of INTO got;
        EXIT WHEN NOT FOUND;
        fetched := fetched + 1;
        SELECT pg_catalog.json_agg(e.value)::text INTO shape
        FROM pg_catalog.json_each(pg_catalog.row_to_json(got)) AS e;
        IF pg_catalog.octet_length(shape) > 4096 THEN
            RAISE EXCEPTION 'the query returned a row of % bytes (at most 4096)',
                pg_catalog.octet_length(shape) USING ERRCODE = 'program_limit_exceeded';
        END IF;
        RETURN NEXT shape;
        EXIT WHEN fetched > max_rows;
    END LOOP;
    CLOSE rows_of;
END
$$;

REVOKE ALL ON FUNCTION runner.verify_query_v1(text, timestamptz, timestamptz, text, text[], integer)
    FROM PUBLIC;
