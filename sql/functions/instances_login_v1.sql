-- runner.instances_login_v1(): a trigger on runner.instances. Whenever a row's backend_pid is the
-- writing session's own pid, login is that session's login role; when a write names another
-- pid, login is NULL (runner.runner_sessions_v1 then falls back to backend_start); any other
-- update keeps it. So no writer chooses it: a worker that registers a squatter's pid as its
-- own instance gets no login for it.

CREATE OR REPLACE FUNCTION runner.instances_login_v1() RETURNS trigger
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

CREATE OR REPLACE TRIGGER instances_login BEFORE INSERT OR UPDATE ON runner.instances FOR EACH ROW EXECUTE FUNCTION runner.instances_login_v1();
