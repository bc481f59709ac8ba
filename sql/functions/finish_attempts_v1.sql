-- runner.finish_attempts_v1: the one place that writes attempt outcomes, for a batch of
-- attempts (runner/ledger.py: finish_attempts; the statement used to be issued directly).
--
-- A run changes only if it is still running under the attempt's fence; an attempt whose
-- fence is stale is closed as 'stale' and its outcome is refused. Returns, per input row,
-- whether it landed. Run outcomes: succeeded, failed (a retry at now + retry_delay), dead,
-- and released (the owner gave the run back: pending again, and the attempt does not count
-- against max_attempts). The attempt's own status defaults to the run outcome (timed_out and
-- released are attempt statuses; handed_off too, issue 33: a released run whose handler
-- stopped at a committed checkpoint when its runner shut down, runner/checkpoints.py).
-- A release (revision 0024_sessions) is due again after its retry delay (none: at once) and
-- makes the run's trigger recovery, except a release with error class runner.LockBusy (the
-- run's key was still held by another registered runner session for a moment, runner/loop.py
-- _key_held): that run keeps its trigger (a retry stays a retry, a catch-up run keeps its
-- one-at-a-time order), and the loop sends a delay of a second, so that a fast poll does not
-- claim it again while the key is still held (a second LockBusy in a row counts).
-- "Landed" is decided per (run id, fence), never per run id: one batch may hold a stale
-- outcome of an old attempt beside the current attempt's outcome of the same run, and only
-- the current one may land; each marks only its own attempt row.
-- Each run and attempt is reached by its key (id; run_id + fence). The status guards compare
-- with input.live ('running') instead of a literal so that the planner cannot prefer the
-- partial indexes of running rows, which keep an entry for every run finished since the last
-- vacuum: under load those indexes grow by thousands of dead entries a second, and a bitmap
-- scan of them would cost every batch more than the batch itself.
--
-- Since revision 0008_watch an outcome may carry the failed attempt's traceback (already
-- redacted and bounded by the runner: runner/attempt.py; cut again here at 20,000
-- characters) and the handler's last heartbeat (a JSON object); both land on the attempt
-- row only, never on the run (runner.job_runs.last_error stays one line).
-- Privileges (revision 0007_security): it runs as its owner (SECURITY DEFINER, fixed
-- search_path) so that the worker role needs no UPDATE of a run's status, trigger, counts of
-- attempts or timestamps, nor of an attempt's status: column grants cannot say "only a
-- running run, only at its fence", this function does. Outcomes that are not one of the four
-- above (and attempt statuses other than those, timed_out and handed_off) are refused. EXECUTE is revoked from PUBLIC; sql/roles.sql grants it to the worker.
-- PL/pgSQL rather than SQL so that the statement's plan is kept for the session, as the
-- prepared statement it replaces was.
-- Planner settings (revision 0019_wide): no sequential scan, no hash or merge join, inside
-- this function only. Each outcome must reach its run and attempt by their keys whatever the
-- tables' statistics say. On a young ledger they say "a few thousand rows" long after the
-- table holds tens of thousands (autovacuum analyzes the hot tables every 100,000 changed
-- rows, revision 0015_scale), and the plan kept for the session was then a hash join over a
-- sequential scan of every run and every attempt for each batch: a batch of 500 outcomes
-- cost the database ~2 x the CPU of the claim that made those runs (scripts/bench/RESULTS.md,
-- "Wider instants ... fan-out at full width").
CREATE OR REPLACE FUNCTION runner.finish_attempts_v1(outcomes jsonb, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (run_id bigint, fence bigint, recorded boolean)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
AS $$
#variable_conflict use_column
BEGIN
    IF EXISTS (SELECT 1 FROM jsonb_array_elements(outcomes) AS e
               WHERE coalesce(e ->> 2, '') NOT IN ('succeeded', 'failed', 'dead', 'released')
                  OR e ->> 3 NOT IN ('succeeded', 'failed', 'dead', 'timed_out', 'released', 'handed_off')) THEN
        RAISE EXCEPTION 'runner.finish_attempts_v1: an outcome is succeeded, failed, dead or released'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH clock AS (
        SELECT coalesce(as_of, now()) AS now
    ), input AS (
        -- outcomes = [[run id, fence, status, attempt status, error class, error message,
        -- retry delay, processed, failed, traceback, last heartbeat], ...] as one JSON
        -- document (the last two since revision 0008_watch; an older runner's shorter rows
        -- leave them NULL)
        SELECT (e ->> 0)::bigint AS run_id, (e ->> 1)::bigint AS fence, e ->> 2 AS status,
               e ->> 3 AS attempt_status, e ->> 4 AS error_class, e ->> 5 AS error_message,
               (e ->> 6)::float8 AS retry_delay, (e ->> 7)::bigint AS processed,
               (e ->> 8)::bigint AS failed, left(e ->> 9, 20000) AS traceback,
               CASE WHEN jsonb_typeof(e -> 10) = 'object' THEN e -> 10 END AS last_heartbeat,
               'running'::text AS live
        FROM jsonb_array_elements(outcomes) AS e
    ), runs AS (
        UPDATE runner.job_runs r
        SET status = CASE i.status WHEN 'released' THEN 'pending' ELSE i.status END,
            trigger = CASE WHEN i.status = 'released' AND i.error_class IS DISTINCT FROM 'runner.LockBusy'
                           THEN 'recovery' ELSE r.trigger END,
            uncounted_attempts = r.uncounted_attempts + CASE i.status WHEN 'released' THEN 1 ELSE 0 END,
            finished_at = CASE WHEN i.status IN ('failed', 'released') THEN NULL ELSE c.now END,
            next_attempt_at = CASE i.status
                                  WHEN 'failed' THEN c.now + make_interval(secs => i.retry_delay)
                                  WHEN 'released' THEN c.now + make_interval(secs => coalesce(i.retry_delay, 0)) END,
            last_error = CASE WHEN i.status IN ('succeeded', 'released') THEN r.last_error
                              ELSE i.error_class || ': ' || i.error_message END,
            processed_count = coalesce(i.processed, r.processed_count),
            failed_count = coalesce(i.failed, r.failed_count),
            updated_at = c.now
        FROM input i, clock c
        WHERE r.id = i.run_id AND r.fence = i.fence AND r.status = i.live
        RETURNING r.id, r.fence
    ), attempts AS (
        UPDATE runner.attempts a
        SET status = CASE WHEN (i.run_id, i.fence) IN (SELECT id, fence FROM runs)
                          THEN coalesce(i.attempt_status, i.status) ELSE 'stale' END,
            finished_at = c.now,
            error_class = i.error_class,
            error_message = i.error_message,
            traceback = i.traceback,
            last_heartbeat = i.last_heartbeat
        FROM input i, clock c
        WHERE a.run_id = i.run_id AND a.fence = i.fence
          -- an abandoned attempt whose owner comes back is marked stale: its write was refused
          AND (a.status = i.live
               OR (a.status = 'abandoned' AND (i.run_id, i.fence) NOT IN (SELECT id, fence FROM runs)))
    )
    SELECT i.run_id, i.fence, (i.run_id, i.fence) IN (SELECT id, fence FROM runs) AS recorded
    FROM input i;
END
$$;
REVOKE ALL ON FUNCTION runner.finish_attempts_v1(jsonb, timestamptz) FROM PUBLIC;
