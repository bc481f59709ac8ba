-- runner.prune_instances_v1(namespace): the retention duty's second half (revision
-- 0016_health). runner.instances gets one row per `runner start` and nothing removed it: a
-- fleet that restarts often (deploys, autoscaling) grew it for ever, and runner.alerts'
-- job_not_in_code read every row of it per job. This deletes, at most 10,000 a call, the
-- instance rows whose last heartbeat is older than the setting runner.instance_retention (an
-- interval, 7 days unless set, never less than 1 hour: ALTER DATABASE app SET
-- runner.instance_retention = '30 days'), and returns how many went.
--
-- Never one that may be live: a row goes only when its heartbeat is that old AND it is not an
-- unstopped instance whose lock session is still connected (runner.runner_sessions_v1's rule:
-- a hung runner keeps its row, so its session is not taken for a squatter) AND no attempt it
-- owns is still running (takeover closes those first). A live runner heartbeats every few
-- seconds, so its row is never that old.
--
-- What the deleted rows knew is kept: before deleting, each job they had in their code gets
-- runner.jobs.in_code_at = the newest heartbeat of those rows that had it (never moved back).
-- job_not_in_code takes "last defined" as greatest(synced_at, in_code_at, the newest heartbeat
-- of a remaining instance with the job), which is what it was over all the rows before: its
-- answer does not depend on keeping old instances, whatever the threshold.
--
-- Who may call it: it runs as its owner (SECURITY DEFINER, fixed search_path); sql/roles.sql
-- grants EXECUTE to the worker role (the background duty); the caller chooses nothing but the
-- lock namespace. One caller at a time: the retention duty's transaction-level advisory lock
-- (namespace, runner.duty_lock_key_v1('prune')), which runner.prune_v1 takes in the same
-- transaction; a call that does not get it returns 0 at once.
CREATE OR REPLACE FUNCTION runner.prune_instances_v1(namespace integer DEFAULT 21077)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    keep constant interval := greatest(
        coalesce(nullif(current_setting('runner.instance_retention', true), '')::interval,
                 interval '7 days'),
        interval '1 hour');
    gone integer;
BEGIN
    IF NOT pg_try_advisory_xact_lock(namespace, runner.duty_lock_key_v1('prune')) THEN
        RETURN 0;
    END IF;
    WITH doomed AS MATERIALIZED (
        SELECT i.instance_id, i.jobs, i.heartbeat_at
        FROM runner.instances i
        WHERE i.heartbeat_at < now() - keep
          AND NOT (i.stopped_at IS NULL
                   AND EXISTS (SELECT 1 FROM pg_stat_activity a
                               WHERE a.pid = i.backend_pid AND a.backend_start <= i.heartbeat_at))
          AND NOT EXISTS (SELECT 1 FROM runner.attempts t
                          WHERE t.owner_instance = i.instance_id AND t.status = 'running')
        ORDER BY i.heartbeat_at
        LIMIT 10000
        FOR UPDATE OF i SKIP LOCKED
    ), seen AS (
        UPDATE runner.jobs j
        SET in_code_at = s.at
        FROM (SELECT x.job_name, max(d.heartbeat_at) AS at
              FROM doomed d CROSS JOIN LATERAL unnest(d.jobs) AS x(job_name)
              GROUP BY x.job_name) s
        WHERE j.job_name = s.job_name AND (j.in_code_at IS NULL OR j.in_code_at < s.at)
    ), deleted AS (
        DELETE FROM runner.instances i USING doomed d
        WHERE i.instance_id = d.instance_id
        RETURNING 1
    )
    SELECT count(*) INTO gone FROM deleted;
    RETURN gone;
END
$$;
REVOKE ALL ON FUNCTION runner.prune_instances_v1(integer) FROM PUBLIC;
