-- runner.runner_sessions_v1(): the backend pids of the registered runner lock sessions.
--
-- A runner registers its lock session in runner.instances (backend_pid, set again by every
-- instance heartbeat, and after a reconnect before any run is locked again). A session is a
-- registered runner session when it is the backend_pid of an instance not stopped and it is
-- that instance's session, not a later one that happens to get a dead runner's pid:
--
--   - it logged in as the role that wrote the pid (runner.instances.login, which a trigger
--     sets from session_user whenever the row's backend_pid is the writing session's own,
--     revision 0024_sessions; no worker can choose it), and
--   - where PostgreSQL shows this viewer the session's start (backend_start: a superuser, a
--     member of pg_read_all_stats or of the session's role; NULL to anyone else), it already
--     existed at the instance's last heartbeat (backend_start <= heartbeat_at).
--
-- Before 0024 the rule was the second point alone, and a NULL backend_start failed it: to a
-- runner logged in as another role than its peer's (two fleets, or one fleet given one login
-- per host), to runner_readonly dashboards and to operators, every runner session of another
-- role looked like a squatter (runner.alerts lock_squatter for each live runner; a runner
-- with pg_signal_backend ended its peers' lock sessions). Instance rows written before 0024
-- have no login: for them the old rule stands until their runner is replaced.
--
-- A runner's lock session is connected to this database (issue 29, point 6): pg_stat_activity
-- lists every database's sessions, and a ledger copied into another database of the cluster
-- (pg_restore, CREATE DATABASE ... TEMPLATE) holds its source's instance rows, whose pids are
-- the source's live runner sessions: without the database they passed for peers here.
--
-- Any other session that holds an advisory key of a runner lock namespace is a squatter
-- (an application sharing RUNNER_LOCK_NAMESPACE, or a hostile login: any role that can
-- connect can take any key): the takeover duty ends it where its role may and runner.alerts
-- shows it as lock_squatter. The login does not prove more than the role: a later session
-- of the same login that gets a dead runner's pid passes the rule for a viewer that cannot
-- see its start (a viewer of that same role, and a superuser, can), until the dead
-- instance's row is pruned; a hostile login of another role never does.
CREATE OR REPLACE FUNCTION runner.runner_sessions_v1()
RETURNS SETOF integer
LANGUAGE sql STABLE
AS $$
    SELECT i.backend_pid
    FROM runner.instances i
    JOIN pg_stat_activity a ON a.pid = i.backend_pid AND a.datname = current_database()
    WHERE i.stopped_at IS NULL
      AND (i.login IS NULL OR a.usesysid = i.login)
      AND (a.backend_start <= i.heartbeat_at OR (a.backend_start IS NULL AND i.login IS NOT NULL))
$$;
