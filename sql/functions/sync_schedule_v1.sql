-- runner.sync_schedule_v1(...): the one writer of a job's schedule history for runners of
-- revision 0026 and later (runner/history.py states the design; this is its SQL). Called by
-- a starting runner for each job of its code, right after its runner.jobs upsert and in the
-- same transaction (reassert false), and by a running runner whose definition of a job is not
-- the history's current one (reassert true, runner/history.py's duty).
--
-- The decision, under the job's row lock (so two syncs of one job are serialised):
--   * no history yet: this definition from the job's track_from ('first sync');
--   * the history's current definition is this one: nothing to write;
--   * another definition is current and a LIVE runner (not stopped, instance heartbeat within
--     fresh_for seconds, its lock session connected: runner.runner_sessions_v1) runs it (its
--     runner.instances.definitions says so): nothing is written, and the job's row in
--     runner.jobs keeps the history's current definition. The two code versions both run;
--     runner.alerts shows definition_conflict naming both fingerprints and hosts. A runner
--     of an older code version restarted during a rollout therefore never rewrites the
--     history back while the newer one runs (issue 26, defect 2);
--   * another definition is current and no live runner runs it: this definition is appended.
--     A starting runner's row is in force from now (its downtime, if any, is judged by the
--     schedule then in force, as before). A running runner re-asserting its definition
--     (reassert) dates it from when the current definition's last runner stopped (its
--     stopped_at, or its last heartbeat if it died), never before this runner's own start
--     nor at or before the current row: this runner ran its own schedule all along, so the
--     slots since then are judged by it, and no slot of the old one that nobody ran is left
--     behind as a phantom gap.
-- Either way the definition is stamped with its fingerprint (runner.schedule_fingerprint_v1)
-- and, for a written row, what explains it (job_schedules.explained_by), which runner check
-- audits (history_unexplained).
--
-- Returns one row: this definition's fingerprint and label, the fingerprint in force after
-- the call, whether a row was appended (and from when), and the live runners that hold the
-- current definition when this one was not written (held_by, "host pid N, ..."). No row: the
-- job does not exist or is retired.
--
-- Dating (issue 28, point 1: a worker login back-dating the history hid missed slots from the
-- gap scan and the audit). This function is the only writer of runner.job_schedules a runner
-- has: sql/roles.sql grants the worker role no INSERT, UPDATE or DELETE on the table. A row
-- it appends is in force from now (the server's clock, the transaction's now()), except:
--   * a job's first row, from the job's track_from (what the job's code says it tracks);
--   * a re-assertion, dated back as said above, and never more than REASSERT_MAX_BACK (60 s)
--     whatever fresh_for the caller passes (fresh_for still decides who counts as live);
--   * as_of: the instant of a start, for tests that inject time. Only a session of the schema
--     owner (or a superuser: session_user a member of the runner schema's owner) may pass one
--     that is not now(); for anyone else an append dated by an as_of in the past or the future
--     is refused, with one line and nothing written (the caller's transaction fails). A 'sync'
--     row dated before it was recorded is reported by runner check (history_unexplained), so
--     even the owner's back-dated starts are visible there.
-- A re-assertion ignores as_of. What explains a row (job_schedules.explained_by) is the
-- function's word, handed to the stamping trigger (runner.job_schedules_stamp_v1) through the
-- transaction-local setting runner.history_explanation; a direct INSERT never chooses it.
-- Who may call it: SECURITY DEFINER with a fixed search_path; EXECUTE for the worker role
-- (sql/roles.sql). The caller chooses its definition (as its runner.jobs upsert does), never
-- a row's date or explanation.
CREATE OR REPLACE FUNCTION runner.sync_schedule_v1(
    job_name text, schedule_kind text, cron text, every_interval interval, timezone text,
    partitions text[], dynamic_partitions boolean, instance uuid DEFAULT NULL,
    reassert boolean DEFAULT false, fresh_for double precision DEFAULT 15,
    as_of timestamptz DEFAULT NULL)
RETURNS TABLE (fingerprint text, label text, current_fingerprint text, appended boolean,
               valid_from timestamptz, held_by text)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    clock constant timestamptz := CASE WHEN reassert THEN now() ELSE coalesce(as_of, now()) END;
    max_back constant interval := interval '60 seconds';  -- REASSERT_MAX_BACK
    owner_oid constant oid := (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'runner');
    fp constant text := runner.schedule_fingerprint_v1(schedule_kind, cron, every_interval, timezone,
                                                       partitions, dynamic_partitions);
    words constant text := runner.schedule_label_v1(schedule_kind, cron, every_interval, timezone,
                                                    partitions, dynamic_partitions);
    job record;
    last record;
    holders text;
    gone timestamptz;
    mine timestamptz;
    since timestamptz;
BEGIN
    SELECT j.track_from, j.retired_at INTO job FROM runner.jobs j
    WHERE j.job_name = sync_schedule_v1.job_name FOR NO KEY UPDATE;
    IF NOT FOUND OR job.retired_at IS NOT NULL THEN
        RETURN;
    END IF;
    SELECT s.* INTO last FROM runner.job_schedules s
    WHERE s.job_name = sync_schedule_v1.job_name ORDER BY s.valid_from DESC LIMIT 1;

    IF last IS NULL OR last.valid_from IS NULL THEN
        PERFORM pg_catalog.set_config('runner.history_explanation', 'first sync', true);
        INSERT INTO runner.job_schedules AS s (job_name, valid_from, schedule_kind, cron, every_interval,
                                               timezone, partitions, dynamic_partitions, explained_by)
        VALUES (sync_schedule_v1.job_name, job.track_from, schedule_kind, cron, every_interval, timezone,
                partitions, dynamic_partitions, 'first sync');
        PERFORM pg_catalog.set_config('runner.history_explanation', '', true);
        RETURN QUERY SELECT fp, words, fp, true, job.track_from, NULL::text;
        RETURN;
    END IF;
    -- (the stamp is recomputed, not trusted: a row written before its trigger existed)
    IF runner.schedule_fingerprint_v1(last.schedule_kind, last.cron, last.every_interval, last.timezone,
                                      last.partitions, last.dynamic_partitions) = fp THEN
        RETURN QUERY SELECT fp, words, fp, false, NULL::timestamptz, NULL::text;
        RETURN;
    END IF;

    SELECT string_agg(i.host || ' pid ' || i.pid, ', ' ORDER BY i.host, i.pid) INTO holders
    FROM runner.instances i
    WHERE i.stopped_at IS NULL
      AND i.instance_id IS DISTINCT FROM sync_schedule_v1.instance
      AND i.heartbeat_at > now() - make_interval(secs => fresh_for)
      AND i.backend_pid IN (SELECT runner.runner_sessions_v1())
      AND i.definitions -> sync_schedule_v1.job_name ->> 'fingerprint' = last.fingerprint;
    IF holders IS NOT NULL THEN
        -- both versions run; the history keeps the live one's, and so does runner.jobs
        UPDATE runner.jobs j
        SET schedule_kind = last.schedule_kind, cron = last.cron, every_interval = last.every_interval,
            timezone = last.timezone, partitions = last.partitions,
            dynamic_partitions = last.dynamic_partitions
        WHERE j.job_name = sync_schedule_v1.job_name
          AND (j.schedule_kind, j.cron, j.every_interval, j.timezone, j.partitions, j.dynamic_partitions)
              IS DISTINCT FROM (last.schedule_kind, last.cron, last.every_interval, last.timezone,
                                last.partitions, last.dynamic_partitions);
        RETURN QUERY SELECT fp, words, last.fingerprint, false, NULL::timestamptz, holders;
        RETURN;
    END IF;

    IF reassert THEN
        SELECT max(coalesce(i.stopped_at, i.heartbeat_at)) INTO gone
        FROM runner.instances i
        WHERE i.instance_id IS DISTINCT FROM sync_schedule_v1.instance
          AND i.definitions -> sync_schedule_v1.job_name ->> 'fingerprint' = last.fingerprint;
        -- (the caller's own instance, on its own lock session: no other session re-asserts)
        SELECT i.started_at INTO mine FROM runner.instances i
        WHERE i.instance_id = sync_schedule_v1.instance AND i.backend_pid = pg_backend_pid();
        -- and never more than fresh_for back: a re-assertion follows the others' stop promptly,
        -- so a forged instance row cannot date a definition far into the past
        since := greatest(last.valid_from + interval '1 microsecond',
                          clock - least(make_interval(secs => fresh_for), max_back),
                          least(clock, greatest(coalesce(gone, mine, clock), coalesce(mine, clock))));
    ELSE
        IF clock IS DISTINCT FROM now()
           AND NOT pg_catalog.pg_has_role(session_user, owner_oid, 'MEMBER') THEN
            RAISE EXCEPTION 'runner.sync_schedule_v1: the schedule of job % may be appended only from now (%), not from % (as_of): only the schema owner dates the schedule history',
                pg_catalog.quote_literal(sync_schedule_v1.job_name), now(), clock
                USING ERRCODE = 'insufficient_privilege';
        END IF;
        since := greatest(last.valid_from + interval '1 microsecond', clock);
    END IF;
    PERFORM pg_catalog.set_config('runner.history_explanation',
                                  CASE WHEN reassert
                                       THEN 're-asserted by a running runner: no live runner ran ' || last.fingerprint
                                            || coalesce(' since ' || gone::text, '')
                                       ELSE 'sync' END, true);
    INSERT INTO runner.job_schedules AS s (job_name, valid_from, schedule_kind, cron, every_interval,
                                           timezone, partitions, dynamic_partitions, explained_by)
    VALUES (sync_schedule_v1.job_name, since, schedule_kind, cron, every_interval, timezone, partitions,
            dynamic_partitions,
            -- (a 'sync' dated before it was recorded, by a caller's as_of, is reported by
            -- runner check: only a re-assertion is dated back, and only as said above)
            CASE WHEN reassert
                 THEN 're-asserted by a running runner: no live runner ran ' || last.fingerprint
                      || coalesce(' since ' || gone::text, '')
                 ELSE 'sync' END);
    PERFORM pg_catalog.set_config('runner.history_explanation', '', true);
    UPDATE runner.jobs j
    SET schedule_kind = sync_schedule_v1.schedule_kind, cron = sync_schedule_v1.cron,
        every_interval = sync_schedule_v1.every_interval, timezone = sync_schedule_v1.timezone,
        partitions = sync_schedule_v1.partitions, dynamic_partitions = sync_schedule_v1.dynamic_partitions
    WHERE j.job_name = sync_schedule_v1.job_name
      AND (j.schedule_kind, j.cron, j.every_interval, j.timezone, j.partitions, j.dynamic_partitions)
          IS DISTINCT FROM (sync_schedule_v1.schedule_kind, sync_schedule_v1.cron,
                            sync_schedule_v1.every_interval, sync_schedule_v1.timezone,
                            sync_schedule_v1.partitions, sync_schedule_v1.dynamic_partitions);
    RETURN QUERY SELECT fp, words, fp, true, since, NULL::text;
END
$$;
REVOKE ALL ON FUNCTION runner.sync_schedule_v1(text, text, text, interval, text, text[], boolean, uuid,
                                               boolean, double precision, timestamptz) FROM PUBLIC;
