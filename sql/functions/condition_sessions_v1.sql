-- runner.condition_sessions_v1(): the backend pids of the runners' condition sessions that
-- are inside an evaluation (issue 28, point 3).
--
-- Each `runner start` evaluates pause conditions on a connection of its own, named
-- runner-condition (runner/conditions.py), logged in as the runner. A condition is an
-- operator's SQL, and PostgreSQL grants the advisory lock functions to PUBLIC (a grant that
-- cannot be withheld from the condition role alone), so for the length of one evaluation a
-- condition may hold run keys: runner.pause_condition_v1 then fails it (the plan pauses), and
-- the session's locks are released right after (at most the evaluation's 3 s). Meanwhile
-- such a session is not a squatter: a run whose claim meets its key is released uncounted
-- and claimed again (sql/queries/ledger.sql key_holder), and the takeover duty does not end
-- it (sql/queries/takeover.sql end_squatters), which would only cut the evaluation short
-- before it could flag the condition.
--
-- A session counts when it is named runner-condition, logged in as the login of a
-- registered runner session (runner.runner_sessions_v1) and inside a transaction begun at
-- most 10 s ago (an evaluation takes 3 s at most). PostgreSQL shows xact_start only to the
-- session's own role (and superusers, pg_read_all_stats): to a runner of another login it is
-- NULL and the session counts as any other holder. The name is anyone's to choose: a session
-- of the runner's login that calls itself runner-condition is spared only while its
-- transaction is young; one that keeps keys longer is a squatter again.
CREATE OR REPLACE FUNCTION runner.condition_sessions_v1()
RETURNS SETOF integer
LANGUAGE sql STABLE
AS $$
    SELECT a.pid
    FROM pg_stat_activity a
    WHERE a.application_name = 'runner-condition'
      AND a.xact_start > now() - interval '10 seconds'
      AND a.usesysid IN (SELECT r.usesysid FROM pg_stat_activity r
                         WHERE r.pid IN (SELECT runner.runner_sessions_v1()))
$$;
