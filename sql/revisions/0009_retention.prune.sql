-- Frozen copy of sql/functions/prune_v1.sql as revision 0009_retention shipped it (revision
-- 0021_prune replaces the live file; its downgrade applies this copy back).
-- runner.prune_v1(batch, as_of, dry_run, namespace): retention. Deletes at most `batch` runs
-- (with their attempts and effects) that the stored retention policy of their job says may
-- go, oldest slot first, and returns each as one row (the run, its attempts and its effects
-- as JSON: `runner prune --archive-*` copies them before the transaction commits). With
-- dry_run, returns what would go and deletes nothing. runner.requests is never touched.
--
-- Policy: runner.jobs.options -> 'retention' as synced from the code (the job's retention=,
-- else the runner's --retention-default): {"succeeded_seconds": S, "failed_seconds": F}. A
-- job without it is never pruned. A run may go when
--   * it accounts for its slot: succeeded, skipped, coalesced or cancelled. Runs that do not
--     (pending, running, failed, dead, awaiting_approval) are never pruned: they are what the
--     gap scan lists, and deleting one would hide a slot that needs a human;
--   * its slot is at or below the job's trusted gap-scan watermark (runner.gap_watermarks,
--     the same trust rule as runner.missing_slots_v1) and no recorded hole is at its slot, so
--     no scan looks for it again; the slot it went from is recorded in
--     gap_watermarks.pruned_through, below which nothing is expanded again;
--   * it is older than its period: greatest(slot, finished_at) before as_of - S, or - F for
--     the runs kept longer: cancelled, retried (attempt > 1), with an error, or touched by an
--     operator (trigger manual or backfill, in a replay group, attempts uncounted by a rerun
--     or approval, skipped by `runner skip`). S and F are at least 1 hour, F at least S.
--
-- Who may call it: it runs as its owner (SECURITY DEFINER, fixed search_path), and sql/roles.sql
-- grants EXECUTE to the worker role (the background duty of every runner) and the operator
-- role (`runner prune`); neither holds DELETE on any ledger table. The caller cannot choose
-- what goes beyond the batch size: the policy is read from the ledger, as_of can only be
-- earlier than the database clock (it is clamped to now()), and the batch is capped at 10,000.
-- One caller at a time across the fleet: a transaction-level advisory lock (namespace,
-- runner.duty_lock_key_v1('prune')); a call that does not get it returns nothing at once.
CREATE OR REPLACE FUNCTION runner.prune_v1(
    batch integer, as_of timestamptz DEFAULT NULL, dry_run boolean DEFAULT false,
    namespace integer DEFAULT 21077)
RETURNS TABLE (job_name text, run_id bigint, schedule_slot timestamptz, status text,
               run jsonb, attempts jsonb, effects jsonb)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    clock constant timestamptz := least(coalesce(as_of, now()), now());
    budget integer := least(greatest(coalesce(batch, 0), 0), 10000);
    j record;
    ids bigint[];
    top timestamptz;
BEGIN
    IF budget = 0 OR NOT pg_try_advisory_xact_lock(namespace, runner.duty_lock_key_v1('prune')) THEN
        RETURN;
    END IF;
    FOR j IN
        SELECT jb.job_name AS name,
               greatest(make_interval(secs => (jb.options -> 'retention' ->> 'succeeded_seconds')::float8),
                        interval '1 hour') AS keep_done,
               greatest(make_interval(secs => coalesce((jb.options -> 'retention' ->> 'failed_seconds')::float8, 0)),
                        make_interval(secs => (jb.options -> 'retention' ->> 'succeeded_seconds')::float8),
                        interval '1 hour') AS keep_long,
               least(w.complete_through, clock,
                     (SELECT min(s.valid_from) FROM runner.job_schedules s
                      WHERE s.job_name = jb.job_name
                        AND s.valid_from > coalesce(w.schedule_from, timestamptz '-infinity'))
                     - interval '1 microsecond') AS mark
        FROM runner.jobs jb
        JOIN runner.gap_watermarks w ON w.job_name = jb.job_name AND w.track_from = jb.track_from
        WHERE jsonb_typeof(jb.options -> 'retention' -> 'succeeded_seconds') = 'number'
          AND w.complete_through IS NOT NULL
        ORDER BY jb.job_name
    LOOP
        EXIT WHEN budget <= 0;
        SELECT coalesce(array_agg(x.id ORDER BY x.id), '{}'), max(x.schedule_slot) INTO ids, top
        FROM (
            SELECT r.id, r.schedule_slot
            FROM runner.job_runs r
            WHERE r.job_name = j.name
              AND r.schedule_slot <= j.mark
              AND r.schedule_slot < clock - j.keep_done
              AND r.status IN ('succeeded', 'skipped', 'coalesced', 'cancelled')
              AND greatest(r.schedule_slot, r.finished_at) < clock - CASE
                      WHEN r.status = 'cancelled' OR r.attempt > 1 OR r.last_error IS NOT NULL
                           OR r.trigger IN ('manual', 'backfill') OR r.replay_group_id IS NOT NULL
                           OR r.uncounted_attempts > 0 OR r.status_reason LIKE 'skipped by %'
                      THEN j.keep_long ELSE j.keep_done END
              AND NOT EXISTS (SELECT 1 FROM runner.gap_holes h
                              WHERE h.job_name = r.job_name AND h.schedule_slot = r.schedule_slot)
            ORDER BY r.schedule_slot, r.id
            LIMIT budget
            FOR UPDATE OF r SKIP LOCKED
        ) AS x;
        CONTINUE WHEN cardinality(ids) = 0;
        budget := budget - cardinality(ids);

        RETURN QUERY
        WITH doomed AS MATERIALIZED (
            SELECT r.* FROM runner.job_runs r WHERE r.id = ANY (ids)
        ), atts AS (
            SELECT a.run_id, jsonb_agg(to_jsonb(a) ORDER BY a.fence, a.id) AS list
            FROM runner.attempts a WHERE a.run_id = ANY (ids) GROUP BY a.run_id
        ), effs AS (
            SELECT e.run_id, jsonb_agg(to_jsonb(e) ORDER BY e.id) AS list
            FROM runner.effects e WHERE e.run_id = ANY (ids) GROUP BY e.run_id
        ), gone_effects AS (
            DELETE FROM runner.effects e WHERE NOT dry_run AND e.run_id = ANY (ids)
        ), gone AS (
            -- attempts go with their run (ON DELETE CASCADE)
            DELETE FROM runner.job_runs r WHERE NOT dry_run AND r.id = ANY (ids)
        )
        SELECT d.job_name, d.id, d.schedule_slot, d.status, to_jsonb(d),
               coalesce(atts.list, '[]'::jsonb), coalesce(effs.list, '[]'::jsonb)
        FROM doomed d
        LEFT JOIN atts ON atts.run_id = d.id
        LEFT JOIN effs ON effs.run_id = d.id
        ORDER BY d.schedule_slot, d.id;

        IF NOT dry_run THEN
            UPDATE runner.gap_watermarks w
            SET pruned_through = greatest(w.pruned_through, top)
            WHERE w.job_name = j.name;
        END IF;
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION runner.prune_v1(integer, timestamptz, boolean, integer) FROM PUBLIC;
