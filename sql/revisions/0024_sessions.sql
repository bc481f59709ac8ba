-- Revision 0024_sessions: the login of a runner's lock session (runner.instances.login), so
-- that runner.runner_sessions_v1 recognises a runner session of another role
-- (sql/functions/runner_sessions_v1.sql says why); and LockBusy releases keep their run's
-- trigger and are due after their delay (sql/functions/finish_attempts_v1.sql).
--
-- Expand only: a nullable column that runners of 0023 never name (their INSERT and UPDATE of
-- runner.instances run the trigger too, so their rows get a login as well), a trigger, and
-- functions and a view replaced with the same signatures and columns.
ALTER TABLE runner.instances ADD COLUMN IF NOT EXISTS login oid;
COMMENT ON COLUMN runner.instances.login IS
    'the role (pg_roles.oid) of the session that wrote backend_pid, set by a trigger from session_user; NULL when that session was not the writer''s own (or before revision 0024)';

-- runner.instances_login_v1(): whenever a row's backend_pid is the writing session's own pid,
-- login is that session's login role; when a write names another pid, login is NULL (the
-- rule of runner.runner_sessions_v1 then falls back to backend_start); any other update keeps
-- it. So no writer chooses it: a worker that registers a squatter's pid as its own instance
-- gets no login for it.
CREATE OR REPLACE FUNCTION runner.instances_login_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF NEW.backend_pid IS NOT DISTINCT FROM pg_backend_pid() THEN
        NEW.login := (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = session_user);
    ELSIF TG_OP = 'INSERT' OR NEW.backend_pid IS DISTINCT FROM OLD.backend_pid THEN
        NEW.login := NULL;
    ELSE
        NEW.login := OLD.login;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS instances_login ON runner.instances;
CREATE TRIGGER instances_login BEFORE INSERT OR UPDATE ON runner.instances
    FOR EACH ROW EXECUTE FUNCTION runner.instances_login_v1();
