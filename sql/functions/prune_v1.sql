-- runner.prune_v1(batch, as_of, dry_run, namespace): retention. Deletes at most `batch` runs
-- (with their attempts and effects) that the stored retention policy of their job says may
-- go, oldest slot first, and returns each as one row (the run, its attempts and its effects
-- as JSON: `runner prune --archive-*` copies them before the transaction commits). With
-- dry_run, returns what would go and deletes nothing. runner.requests is never touched.
-- What outlives a pruned run (revision 0026_history): each confirmed effect key, compactly
-- (runner.effect_keys: key, job, confirmed_at), so the effect log never sends it again
-- whatever run asks later (a backfill --force of the slot, a rerun); and each effect whose
-- delivery is unknown (sent, unknown), whose row stays in runner.effects with run_id NULL
-- (its check must resolve it before it is sent again). Planned and failed effects go.
--
-- Policy: runner.jobs.options -> 'retention' as synced from the code (the job's retention=,
-- else the runner's --retention-default): {"succeeded_seconds": S, "failed_seconds": F}, F
-- optional (6 x S when absent). A job without S is never pruned. A run may go when
--   * it accounts for its slot: succeeded, skipped, coalesced or cancelled; or, only when the
--     policy sets F, it is dead or failed with no retry pending (next_attempt_at IS NULL).
--     Pending, running and awaiting_approval runs, failed runs with a retry pending and
--     dead or failed runs of a replay plan not over (planned, running, paused) are never
--     pruned, nor dead and failed ones of a job whose policy does not set F: the gap
--     scan lists them, and pruning one ends that listing (the slot is then at or below
--     pruned_through, which nothing expands again), so that needs the job's owner to have
--     said how long such a run may stay listed;
--   * its slot is at or below the job's trusted gap-scan watermark (runner.gap_watermarks,
--     the same trust rule as runner.missing_slots_v1) and no recorded hole is at its slot, so
--     no scan looks for it again; the slot it went from is recorded in
--     gap_watermarks.pruned_through, below which nothing is expanded again;
--   * it is older than its period: greatest(slot, finished_at) before as_of - S, or - F for
--     the runs kept longer: dead and failed ones, cancelled, retried (attempt > 1), with an
--     error, or touched by an operator (trigger manual or backfill, in a replay group,
--     attempts uncounted by a rerun or approval, skipped by `runner skip`). S and F are at
--     least 1 hour, F at least S.
-- The slot fan-outs (runner.slot_fanouts) of slots at or below pruned_through go too, once
-- no run and no hole of the slot is left.
--
-- Cost (revision 0021_prune): a pass reads at most batch + 1,000 of each job's runs and 1,000
-- of its fan-outs, however many runs it keeps. Each job is swept from a cursor
-- (gap_watermarks.prune_cursor, the slot through which the sweep has looked at every run)
-- upwards, oldest slot first; at the top of the range (the watermark, or as_of - S) the next
-- pass starts again from the bottom (a dry run looks from the bottom, unbounded, and moves no
-- cursor: an operator's look at everything that would go). So a kept run (its period not over, a hole at its slot,
-- a retry pending, kept by status, locked by another transaction) is read once a sweep, not
-- once a pass, and is looked at again by the next sweep: nothing that may go later is passed
-- for good. The price: with many kept runs, a run that may go waits for the sweep to reach it
-- (kept runs / 1,000 passes at most). A slot with more kept runs than the step is passed
-- whole (its later partitions wait for a sweep that reaches them). Before 0021 the candidate
-- query walked each job's runs from its oldest slot on every pass (9.6 / 15.6 / 49.8 ms with
-- 400 / 40,000 / 200,000 kept dead runs and nothing to prune).
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
    -- rows of a job a pass may look at beyond the batch (the sweep's step)
    sweep constant integer := 1000;
    j record;
    fit integer;
    ids bigint[];
    top timestamptz;
    seen integer;
    reach integer;
    last_slot timestamptz;
    taken_slot timestamptz;
    next_cursor timestamptz;
    fans integer;
    last_fan timestamptz;
    pruned timestamptz;
BEGIN
    IF budget = 0 OR NOT pg_try_advisory_xact_lock(namespace, runner.duty_lock_key_v1('prune')) THEN
        RETURN;
    END IF;
    FOR j IN
        SELECT jb.job_name AS name,
               greatest(make_interval(secs => (jb.options -> 'retention' ->> 'succeeded_seconds')::float8),
                        interval '1 hour') AS keep_done,
               -- failed_seconds, else 6 x succeeded_seconds (the code's default)
               greatest(CASE WHEN jsonb_typeof(jb.options -> 'retention' -> 'failed_seconds') = 'number'
                             THEN make_interval(secs => (jb.options -> 'retention' ->> 'failed_seconds')::float8)
                             ELSE make_interval(secs => 6 * (jb.options -> 'retention' ->> 'succeeded_seconds')::float8)
                        END,
                        make_interval(secs => (jb.options -> 'retention' ->> 'succeeded_seconds')::float8),
                        interval '1 hour') AS keep_long,
               -- dead runs and failed runs with no retry pending go only when the policy says
               -- how long to keep them
               coalesce(jsonb_typeof(jb.options -> 'retention' -> 'failed_seconds') = 'number', false)
                   AS ends_dead,
               least(w.complete_through, clock,
                     (SELECT min(s.valid_from) FROM runner.job_schedules s
                      WHERE s.job_name = jb.job_name
                        AND s.valid_from > coalesce(w.schedule_from, timestamptz '-infinity'))
                     - interval '1 microsecond') AS mark,
               w.prune_cursor AS from_slot, w.pruned_through AS pruned_before
        FROM runner.jobs jb
        JOIN runner.gap_watermarks w ON w.job_name = jb.job_name AND w.track_from = jb.track_from
        WHERE jsonb_typeof(jb.options -> 'retention' -> 'succeeded_seconds') = 'number'
          AND w.complete_through IS NOT NULL
        ORDER BY jb.job_name
    LOOP
        EXIT WHEN budget <= 0;
        -- The sweep: the job's runs above its cursor, oldest slot first, at most the batch
        -- plus `sweep` of them (a plain read: the kept ones are only looked at); those that
        -- may go are taken until the batch is full. The cursor moves to the slot through
        -- which every run was looked at; at the top of the range it goes back to the bottom,
        -- so a run kept now (its period not over, a hole at its slot, a retry pending, locked)
        -- is looked at again by the next sweep, and the runs kept are read once a sweep, not
        -- once a pass.
        -- (a dry run looks from the bottom, as far as it takes: it moves no cursor)
        reach := CASE WHEN NOT dry_run THEN budget + sweep END;
        SELECT coalesce(array_agg(s.id ORDER BY s.slot, s.key) FILTER (WHERE s.may_go AND s.nth <= budget), '{}'),
               count(*), max(s.slot), max(s.slot) FILTER (WHERE s.may_go AND s.nth <= budget),
               count(*) FILTER (WHERE s.may_go)
        INTO ids, seen, last_slot, taken_slot, fit
        FROM (
            SELECT c.*, count(*) FILTER (WHERE c.may_go) OVER (ORDER BY c.slot, c.key ROWS UNBOUNDED PRECEDING) AS nth
            FROM (
                SELECT r.id, r.schedule_slot AS slot, r.partition_key AS key,
                       ((runner.run_covered_v1(r.job_name, r.partition_key, r.status, r.coalesced_into_slot)
                         AND greatest(r.schedule_slot, r.finished_at) < clock - CASE
                             WHEN r.status = 'cancelled' OR r.attempt > 1 OR r.last_error IS NOT NULL
                                  OR r.trigger IN ('manual', 'backfill') OR r.replay_group_id IS NOT NULL
                                  OR r.uncounted_attempts > 0 OR r.status_reason LIKE 'skipped by %'
                             THEN j.keep_long ELSE j.keep_done END)
                        OR (j.ends_dead
                            AND (r.status = 'dead' OR (r.status = 'failed' AND r.next_attempt_at IS NULL))
                            -- (not one a replay plan that is not over may still run again)
                            AND (r.replay_group_id IS NULL OR NOT EXISTS (
                                    SELECT 1 FROM runner.backfills b WHERE b.replay_group_id = r.replay_group_id
                                      AND b.status IN ('planned', 'running', 'paused')))
                            AND greatest(r.schedule_slot, r.finished_at) < clock - j.keep_long))
                       AND NOT EXISTS (SELECT 1 FROM runner.gap_holes h
                                       WHERE h.job_name = r.job_name AND h.schedule_slot = r.schedule_slot)
                       AS may_go
                FROM runner.job_runs r
                WHERE r.job_name = j.name
                  AND r.schedule_slot > CASE WHEN dry_run THEN timestamptz '-infinity'
                                             ELSE coalesce(j.from_slot, timestamptz '-infinity') END
                  AND r.schedule_slot <= j.mark
                  AND r.schedule_slot < clock - j.keep_done
                ORDER BY r.schedule_slot, r.partition_key
                LIMIT reach
            ) AS c
        ) AS s;
        -- where this sweep goes on next time: below a slot not looked at in full, else the
        -- top of the range was reached and the next pass starts again at the bottom
        IF fit >= budget THEN
            next_cursor := taken_slot - interval '1 microsecond';
        ELSIF seen >= reach THEN
            -- (a slot with more kept runs than the step is passed whole: see the note above)
            next_cursor := greatest(last_slot - interval '1 microsecond',
                                    CASE WHEN last_slot - interval '1 microsecond' <= j.from_slot
                                         THEN last_slot END);
        ELSE
            next_cursor := NULL;
        END IF;

        -- the ones taken, locked (a run another transaction holds is skipped: the next sweep
        -- looks at it again), each checked again on its current row
        SELECT coalesce(array_agg(x.id ORDER BY x.id), '{}'), max(x.schedule_slot) INTO ids, top
        FROM (
            SELECT r.id, r.schedule_slot
            FROM runner.job_runs r
            WHERE r.id = ANY (ids)
              AND ((runner.run_covered_v1(r.job_name, r.partition_key, r.status, r.coalesced_into_slot)
                    AND greatest(r.schedule_slot, r.finished_at) < clock - CASE
                        WHEN r.status = 'cancelled' OR r.attempt > 1 OR r.last_error IS NOT NULL
                             OR r.trigger IN ('manual', 'backfill') OR r.replay_group_id IS NOT NULL
                             OR r.uncounted_attempts > 0 OR r.status_reason LIKE 'skipped by %'
                        THEN j.keep_long ELSE j.keep_done END)
                   OR (j.ends_dead
                       AND (r.status = 'dead' OR (r.status = 'failed' AND r.next_attempt_at IS NULL))
                       -- (not one a replay plan that is not over may still run again)
                       AND (r.replay_group_id IS NULL OR NOT EXISTS (
                               SELECT 1 FROM runner.backfills b WHERE b.replay_group_id = r.replay_group_id
                                 AND b.status IN ('planned', 'running', 'paused')))
                       AND greatest(r.schedule_slot, r.finished_at) < clock - j.keep_long))
            ORDER BY r.schedule_slot, r.id
            FOR UPDATE OF r SKIP LOCKED
        ) AS x;
        budget := budget - cardinality(ids);

        IF cardinality(ids) > 0 THEN
            RETURN QUERY
            WITH doomed AS MATERIALIZED (
                SELECT r.* FROM runner.job_runs r WHERE r.id = ANY (ids)
            ), atts AS (
                SELECT a.run_id, jsonb_agg(to_jsonb(a) ORDER BY a.fence, a.id) AS list
                FROM runner.attempts a WHERE a.run_id = ANY (ids) GROUP BY a.run_id
            ), effs AS (
                SELECT e.run_id, jsonb_agg(to_jsonb(e) ORDER BY e.id) AS list
                FROM runner.effects e WHERE e.run_id = ANY (ids) GROUP BY e.run_id
            ), kept_keys AS (
                -- confirmed keys outlive their run (revision 0026_history): never sent again
                INSERT INTO runner.effect_keys (effect_key, job_name, confirmed_at)
                SELECT e.effect_key, e.job_name, e.confirmed_at
                FROM runner.effects e
                WHERE NOT dry_run AND e.run_id = ANY (ids) AND e.status = 'confirmed'
                ON CONFLICT (effect_key) DO NOTHING
            ), gone_effects AS (
                -- a key whose delivery is unknown (sent, unknown) stays, its run_id NULL: it
                -- must still be resolved by a check before anything is sent again
                DELETE FROM runner.effects e
                WHERE NOT dry_run AND e.run_id = ANY (ids) AND e.status IN ('planned', 'failed', 'confirmed')
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
        END IF;

        CONTINUE WHEN dry_run;
        pruned := CASE WHEN top IS NULL THEN j.pruned_before ELSE greatest(j.pruned_before, top) END;

        -- Slot fan-outs above the cursor, at or below pruned_through, once no run and no hole
        -- of the slot is left (nothing expands those slots again): at most `sweep` fan-outs
        -- looked at; if that many, the cursor stays at the last one looked at.
        IF pruned IS NOT NULL THEN
            WITH looked AS MATERIALIZED (
                SELECT f.schedule_slot
                FROM runner.slot_fanouts f
                WHERE f.job_name = j.name
                  AND f.schedule_slot > coalesce(j.from_slot, timestamptz '-infinity')
                  AND f.schedule_slot <= pruned
                ORDER BY f.schedule_slot
                LIMIT sweep
            ), gone_fanouts AS (
                DELETE FROM runner.slot_fanouts f
                USING looked l
                WHERE f.job_name = j.name AND f.schedule_slot = l.schedule_slot
                  AND NOT EXISTS (SELECT 1 FROM runner.job_runs r
                                  WHERE r.job_name = f.job_name AND r.schedule_slot = f.schedule_slot)
                  AND NOT EXISTS (SELECT 1 FROM runner.gap_holes h
                                  WHERE h.job_name = f.job_name AND h.schedule_slot = f.schedule_slot)
            )
            SELECT count(*)::integer, max(l.schedule_slot) INTO fans, last_fan FROM looked l;
            IF fans >= sweep THEN
                next_cursor := least(coalesce(next_cursor, last_fan), last_fan);
            END IF;
        END IF;

        UPDATE runner.gap_watermarks w SET pruned_through = pruned, prune_cursor = next_cursor
        WHERE w.job_name = j.name
          AND (w.pruned_through IS DISTINCT FROM pruned OR w.prune_cursor IS DISTINCT FROM next_cursor);
    END LOOP;
END
$$;
REVOKE ALL ON FUNCTION runner.prune_v1(integer, timestamptz, boolean, integer) FROM PUBLIC;
