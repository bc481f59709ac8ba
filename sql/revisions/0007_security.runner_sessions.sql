-- runner.runner_sessions_v1(): the backend pids of the registered runner lock sessions.
--
-- A runner registers its lock session in runner.instances (backend_pid, set again by every
-- instance heartbeat, and after a reconnect before any run is locked again). A session is a
-- registered runner session when it is the backend_pid of an instance not stopped, and it
-- already existed at that instance's last heartbeat (backend_start <= heartbeat_at), so a
-- later session that happens to get a dead runner's pid is not mistaken for it.
--
-- Any other session that holds an advisory key of a runner lock namespace is a squatter
-- (an application sharing RUNNER_LOCK_NAMESPACE, or a hostile login: any role that can
-- connect can take any key): the takeover duty ends it where its role may and runner.alerts
-- shows it as lock_squatter (sql/views/alerts.sql applies the same rule inline, since that
-- view is older than this function).
CREATE OR REPLACE FUNCTION runner.runner_sessions_v1()
RETURNS SETOF integer
LANGUAGE sql STABLE
AS $$
    SELECT i.backend_pid
    FROM runner.instances i
    JOIN pg_stat_activity a ON a.pid = i.backend_pid
    WHERE i.stopped_at IS NULL AND a.backend_start <= i.heartbeat_at
$$;
