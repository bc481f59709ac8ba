-- End a registered runner's lock session (a hung owner's, past its lease), when this role may;
-- false otherwise. pg_terminate_backend raises insufficient_privilege (rather than returning
-- false) when the caller is neither superuser, nor the holder's role, nor a member of
-- pg_signal_backend; a runner without that privilege keeps running and the hung attempt stays
-- reported.
--
-- Only a session proven to be a runner's own lock session is ever ended, whoever calls this:
-- the pid is a registered runner session (runner.runner_sessions_v1: the backend_pid of an
-- instance not stopped, of the login that registered it, already there at its last heartbeat
-- where its start is visible) and that backend's application_name is 'runner', the name every
-- lock session connects with (runner/worker/config.py). Any other session is never ended: a
-- squatter holding runner keys (it may be an application's session, or a pooled backend that
-- a pooler in transaction mode hands to the application's clients between transactions: a
-- runner through such a pool took locks there and left them), reported instead
-- (runner.alerts lock_squatter). A runner's lock session reached through a transaction pool is
-- refused when it opens (runner/pooler.py), so no registered session of this release is one.
CREATE OR REPLACE FUNCTION runner.try_terminate_v1(pid integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE STRICT
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                   WHERE a.pid = try_terminate_v1.pid AND a.application_name = 'runner')
       OR try_terminate_v1.pid NOT IN (SELECT runner.runner_sessions_v1()) THEN
        RETURN false;
    END IF;
    RETURN pg_terminate_backend(try_terminate_v1.pid);
EXCEPTION WHEN insufficient_privilege THEN
    RETURN false;
END
$$;
