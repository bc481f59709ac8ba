-- End a session that holds a hung owner's locks, when this role may; false otherwise.
-- pg_terminate_backend raises insufficient_privilege (rather than returning false) when the
-- caller is neither superuser, nor the holder's role, nor a member of pg_signal_backend; a
-- runner without that privilege keeps running and the hung attempt stays reported.
CREATE OR REPLACE FUNCTION runner.try_terminate_v1(pid integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
AS $$
BEGIN
    RETURN pg_terminate_backend(pid);
EXCEPTION WHEN insufficient_privilege THEN
    RETURN false;
END
$$;
