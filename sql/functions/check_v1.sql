-- runner.check_v1: the ledger audit. Plain SQL over the ledger (SECURITY INVOKER, read-only:
-- any role that may read the runner schema may run it), one row per invariant violation with
-- the rows involved. A correct ledger returns no row. `runner check` prints it; the tests and
-- the fault suite call it after every scenario. runner.violations is its call at now().
--
-- Arguments. as_of: the instant the ledger is judged at (default now()); since: only slots at
-- or after it (default: every slot, and for the expected slots each job's track_from);
-- stale_after: how long a running attempt may go without a lock holder before it counts as
-- orphaned (default 2 s: two poll intervals of a default runner, by which time any live
-- runner's takeover pass has replaced a dead owner).
--
-- Columns: invariant (its name, below), job_name, schedule_slot, partition_key (NULL for a
-- dynamic slot expected as a whole), run_id, attempt_id (when one attempt is at fault), and
-- detail (a JSON object with the states that make it a violation).
--
-- The invariants. Each holds in every ledger the runner writes, under any crash, kill,
-- stop or cut connection; the statements that keep it are named beside it.
--
--   two_successes            a run has two succeeded attempts with no operator re-queue
--                            (an attempt triggered manual or backfill: `runner rerun
--                            --force`, a forced backfill) between them. finish_attempts
--                            records an outcome only at the run's fence while it runs.
--   stale_success            a succeeded run whose attempt at its fence is not succeeded; a
--                            succeeded attempt at the run's fence while the run is not
--                            succeeded (and was not re-queued by an operator); or the run
--                            went on to a later attempt after a recorded success without
--                            an operator re-queue (the last success is not the run's).
--   coalesced_into_nothing   a coalesced run whose coalesced_into_slot is NULL, has no run of
--                            the same job and partition, or points to a run that is itself
--                            skipped, coalesced or cancelled (misfire.py records the
--                            covering run in the same transaction).
--   attempts_beyond_max      counted attempts beyond the job's max_attempts. Counted, as the
--                            code counts them (ClaimedRun.counted_attempts, attempt.failure,
--                            runner.start_attempts_v1): job_runs.attempt -
--                            job_runs.uncounted_attempts, i.e. every attempt except those
--                            released at shutdown (finish_attempts adds one to
--                            uncounted_attempts) and those before an operator's rerun,
--                            approval or backfill (which set uncounted_attempts = attempt: a
--                            full budget again). Taken-over (abandoned) attempts and
--                            recoveries count: runner.start_attempts_v1 starts any attempt
--                            only while counted < max_attempts (else the run goes dead), so
--                            counted > max_attempts is always a violation. Judged by the
--                            job's current max_attempts (the ledger keeps no history of it):
--                            lowering max_attempts below what older runs used shows them.
--   unlisted_gap             the gap scan misses something. Either an expected slot x
--                            partition in the tracked range (slots at or after
--                            greatest(track_from, since), up to as_of; above what retention
--                            pruned, gap_watermarks.pruned_through; owed by the one
--                            definition, runner.expected_slots_v1: of the schedule history,
--                            tracked, not retired, paused or not) that has no run and
--                            is not listed by runner.missing_slots_v1(as_of, NULL, since); or
--                            a run in that range that does not account for its slot
--                            (pending, failed, dead, awaiting_approval) and is not listed
--                            with its run id. Expected slots are expanded here by
--                            runner.expected_slots_v1 (the schedule history, no watermark,
--                            no recorded hole), not by the gap scan's own watermarked
--                            expansion, so a watermark or hole bug cannot hide itself: static partitions
--                            from job_schedules.partitions ('' when unpartitioned); for a
--                            dynamic-partition job, the partitions recorded for the slot in
--                            runner.slot_fanouts, each to be listed by name; a dynamic slot
--                            without a fan-out row (or whose fan-out failed) is expected as
--                            a whole: with no run at all, it must be listed with a NULL
--                            partition.
--   running_without_attempt  a running run whose attempt at its fence is missing or not
--                            running (claims, takeovers and outcomes change both in one
--                            statement).
--   attempt_without_run_running
--                            a running attempt whose run is not running or has another fence.
--   orphaned_running         a running attempt whose advisory lock (attempts.lock_key, one
--                            bigint key: pg_locks classid = high 32 bits, objid = low 32
--                            bits, objsubid 1) no session holds, started and last beaten
--                            more than stale_after before as_of: its owner is gone and no
--                            takeover replaced it (no runner is alive, or takeover is
--                            broken). pg_locks is read live, not from the statement's
--                            snapshot: runner/audit.py confirms these rows with a second
--                            look before reporting them.
--   skipped_without_reason   a skipped, coalesced or cancelled run without status_reason.
--   fence_behind             a run whose fence is lower than one of its attempts' fences.
--   started_before_slot      an attempt that started before its run's slot instant (issue 26,
--                            defect 1: a backfill ran future slots). Every claim starts at
--                            or after the slot by the database's clock: claim_slots claims
--                            slots <= now, runner.start_attempts_v1 and claim_plan_runs
--                            start nothing whose slot is after now.
--   plan_completed_not_done  a backfill plan `completed` while a run of its range (a run of
--                            its job, slot in [range_from, range_to), partition among its
--                            partitions when it names them, belonging to it or to an
--                            overlapping plan) was not done: not succeeded, skipped or
--                            coalesced, at the plan's finished_at (the run unchanged since).
--                            The lane completes a plan only when runner.plan_range_v1
--                            finds every run of its range done (issue 26, defect 7).
--   cover_not_covered        a coalesced run whose covering run (same job and partition,
--                            at coalesced_into_slot) exists but will not cover it: dead or
--                            awaiting approval, and the coalesced slot is not listed by
--                            the gap scan. (A missing, skipped, coalesced or cancelled
--                            cover is coalesced_into_nothing; a cover that is pending,
--                            running or failed with a retry is still at work.)
--   unlisted_gap (runs)      also a run that does not account for its slot before the
--                            job's track_from (a backfill of history before the job was
--                            registered): the gap scan lists those too.
--   stranded_run             a pending or failed run with no next_attempt_at outside an
--                            unfinished backfill plan: no claim statement will ever start it
--                            (claim_due_runs needs next_attempt_at; only the backfill lane
--                            starts runs without one, and only those of its live plans).
--   effect_key_twice         a confirmed effect key recorded twice: a key kept in
--                            runner.effect_keys (confirmed by a run that retention pruned,
--                            runner.prune_v1) that runner.effects holds again as sent,
--                            confirmed, failed or unknown, i.e. it was sent again after its
--                            run was pruned (runner/effects.py never does: get_effect reads
--                            the kept keys, mark_sent refuses them). In runner.effects itself
--                            a key is unique (effects_key).
--   history_unexplained      a schedule history row (runner.job_schedules) that no runner's
--                            sync, re-assertion or definition explains. Every row is stamped
--                            when written (the trigger job_schedules_stamp, revision
--                            0003_history: fingerprint, recorded_at, explained_by; never the
--                            writer's choice). Reported: a row left unexplained by its stamp
--                            (written by a role that is not the schema owner, outside
--                            runner.sync_schedule_v1, and neither in force from when it was
--                            written nor the job's first row at its track_from); a row whose
--                            stored fingerprint is not its definition's; and any row dated
--                            before it was recorded, whoever wrote it (a superuser's plain
--                            INSERT included), unless it is its job's first row (a first
--                            sync, from the job's track_from) or a runner's re-assertion
--                            dated back at most 60 s (runner.sync_schedule_v1's bound). A
--                            back-dated row hides missed slots from the gap scan and from
--                            this audit's unlisted_gap (issue 28 point 1). Rows written
--                            before 0003 are trusted as they were (recorded_at =
--                            valid_from). slot = the row's valid_from.
--   checkpoint_not_owned     a run's committed checkpoint (job_runs.checkpoint_fence, issue 33)
--                            written by a fence that did not own the run when it committed:
--                            a checkpoint fence above the run's fence, or with no attempt of
--                            the run, or a later attempt that took the fence before that
--                            checkpoint was committed (attempts.checkpoints_before, the run's
--                            count of checkpoints as the attempt took the fence, is below the
--                            run's count: the checkpoint came after the fence moved on).
--                            runner.checkpoint_v1 writes only at the run's fence while it runs,
--                            under its row lock, and runner.start_attempts_v1 reads the count
--                            under the same lock.
--
-- Cost: the run and attempt invariants read the ledger's runs and attempts (at or after
-- `since`); unlisted_gap expands every expected slot since greatest(track_from, since) --
-- pass `since` (runner check --since) on a large, old ledger.

CREATE OR REPLACE FUNCTION runner.check_v1(
    as_of timestamptz DEFAULT NULL, since timestamptz DEFAULT NULL,
    stale_after interval DEFAULT interval '2 seconds')
RETURNS TABLE (
    invariant text, job_name text, schedule_slot timestamptz, partition_key text,
    run_id bigint, attempt_id bigint, detail jsonb)
LANGUAGE sql STABLE SECURITY INVOKER
-- as in runner.missing_slots_v1: the slot expansions' large default estimates would make JIT
-- compile a plan that runs in milliseconds
SET jit = off
AS $$
WITH clock AS MATERIALIZED (
    SELECT coalesce(check_v1.as_of, now()) AS now,
           (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database()) AS db
), runs AS MATERIALIZED (
    SELECT r.*
    FROM runner.job_runs r
    WHERE check_v1.since IS NULL OR r.schedule_slot >= check_v1.since
), successes AS MATERIALIZED (
    -- each succeeded attempt with the run's next one. Operator re-queues between two fences
    -- (an attempt triggered manual or backfill: rerun --force, a forced backfill) are looked
    -- up below by (run_id, fence), on the attempts' unique index.
    SELECT a.id, a.run_id, a.fence, a.attempt, a.finished_at,
           lead(a.id) OVER w AS next_id, lead(a.fence) OVER w AS next_fence
    FROM runs r
    JOIN runner.attempts a ON a.run_id = r.id
    WHERE a.status = 'succeeded'
    WINDOW w AS (PARTITION BY a.run_id ORDER BY a.fence)
), live_attempts AS MATERIALIZED (
    SELECT a.* FROM runner.attempts a WHERE a.status = 'running'
),
-- == expected slots, for unlisted_gap =========================================================
tracked AS MATERIALIZED (
    -- above what retention pruned (revision 0009): at or below gap_watermarks.pruned_through
    -- the runs that accounted for their slots may be gone, on purpose
    SELECT j.job_name,
           greatest(j.track_from, check_v1.since,
                    (SELECT w.pruned_through + interval '1 microsecond' FROM runner.gap_watermarks w
                     WHERE w.job_name = j.job_name)) AS first_slot
    FROM runner.jobs j
), expected AS (
    -- the owed slots (runner.expected_slots_v1, the one definition: the schedule history,
    -- tracked, not retired, due; paused ones too, which the gap scan lists as well) in
    -- [first_slot, as_of], each partition it expects
    SELECT t.job_name, x.schedule_slot AS slot, p.key AS partition_key, x.dynamic_partitions AS dynamic,
           f.job_name IS NOT NULL AS fanned_out
    FROM tracked t
    CROSS JOIN clock c
    CROSS JOIN LATERAL runner.expected_slots_v1(t.job_name, t.first_slot, c.now, c.now) AS x
    LEFT JOIN runner.slot_fanouts f
           ON x.dynamic_partitions AND f.job_name = t.job_name AND f.schedule_slot = x.schedule_slot
          AND f.error IS NULL
    CROSS JOIN LATERAL unnest(CASE WHEN NOT x.dynamic_partitions
                                       THEN coalesce(x.partitions, ARRAY[''])
                                   WHEN f.job_name IS NOT NULL THEN f.partitions
                                   ELSE ARRAY[NULL::text] END) AS p(key)
), listed AS MATERIALIZED (
    SELECT m.job_name, m.schedule_slot, m.partition_key, m.run_id
    FROM clock c CROSS JOIN LATERAL runner.missing_slots_v1(c.now, NULL, check_v1.since) AS m
)
-- == the invariants ===========================================================================
SELECT v.invariant, v.job_name, v.schedule_slot, v.partition_key, v.run_id, v.attempt_id, v.detail
FROM (
    SELECT 'two_successes'::text AS invariant, r.job_name, r.schedule_slot, r.partition_key,
           r.id AS run_id, s.next_id AS attempt_id,
           jsonb_build_object('run_status', r.status, 'run_fence', r.fence,
                              'succeeded_attempt_ids', jsonb_build_array(s.id, s.next_id),
                              'succeeded_fences', jsonb_build_array(s.fence, s.next_fence)) AS detail
    FROM successes s
    JOIN runs r ON r.id = s.run_id
    WHERE s.next_id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM runner.attempts q
                      WHERE q.run_id = s.run_id AND q.fence > s.fence AND q.fence <= s.next_fence
                        AND q.trigger IN ('manual', 'backfill'))

    UNION ALL
    -- a succeeded run, and its attempt at its fence is missing or not succeeded
    SELECT 'stale_success', r.job_name, r.schedule_slot, r.partition_key, r.id, a.id,
           jsonb_build_object('run_status', r.status, 'run_fence', r.fence,
                              'attempt_status', a.status,
                              'problem', CASE WHEN a.id IS NULL THEN 'no attempt at the run''s fence'
                                              ELSE 'the attempt at the run''s fence is not succeeded' END)
    FROM runs r
    LEFT JOIN runner.attempts a ON a.run_id = r.id AND a.fence = r.fence
    WHERE r.status = 'succeeded' AND a.status IS DISTINCT FROM 'succeeded'

    UNION ALL
    -- a run's last recorded success, and the run is no longer succeeded at that success
    SELECT 'stale_success', r.job_name, r.schedule_slot, r.partition_key, r.id, s.id,
           jsonb_build_object('run_status', r.status, 'run_fence', r.fence, 'run_trigger', r.trigger,
                              'attempt_fence', s.fence,
                              'problem', CASE WHEN s.fence = r.fence
                                              THEN 'a succeeded attempt at the run''s fence, the run not succeeded'
                                              ELSE 'the run went on to a later fence after a recorded success' END)
    FROM successes s
    JOIN runs r ON r.id = s.run_id
    WHERE s.next_id IS NULL
      AND ((s.fence = r.fence AND r.status <> 'succeeded'
            AND NOT (r.trigger IN ('manual', 'backfill') AND r.status IN ('pending', 'cancelled')))
           OR (s.fence < r.fence
               AND NOT EXISTS (SELECT 1 FROM runner.attempts q
                               WHERE q.run_id = s.run_id AND q.fence > s.fence AND q.fence <= r.fence
                                 AND q.trigger IN ('manual', 'backfill'))))

    UNION ALL
    SELECT 'coalesced_into_nothing', r.job_name, r.schedule_slot, r.partition_key, r.id, NULL,
           jsonb_build_object('coalesced_into_slot', r.coalesced_into_slot, 'target_run_id', t.id,
                              'target_status', t.status)
    FROM runs r
    LEFT JOIN runner.job_runs t
           ON t.job_name = r.job_name AND t.schedule_slot = r.coalesced_into_slot
          AND t.partition_key = r.partition_key
    WHERE r.status = 'coalesced'
      AND (t.id IS NULL OR t.status IN ('skipped', 'coalesced', 'cancelled'))

    UNION ALL
    SELECT 'attempts_beyond_max', r.job_name, r.schedule_slot, r.partition_key, r.id, NULL,
           jsonb_build_object('counted_attempts', r.attempt - r.uncounted_attempts,
                              'max_attempts', j.max_attempts, 'attempt', r.attempt,
                              'uncounted_attempts', r.uncounted_attempts, 'run_status', r.status,
                              'taken_over_attempts', o.n)
    FROM runs r
    JOIN runner.jobs j ON j.job_name = r.job_name
    CROSS JOIN LATERAL (SELECT count(*) AS n FROM runner.attempts a
                        WHERE a.run_id = r.id AND a.status IN ('abandoned', 'stale')) AS o
    WHERE r.attempt - r.uncounted_attempts > j.max_attempts

    UNION ALL
    -- an expected slot x partition with no run, that the gap scan does not list
    SELECT 'unlisted_gap', e.job_name, e.slot, e.partition_key, NULL, NULL,
           jsonb_build_object('problem', 'no run, and not listed by runner.missing_slots',
                              'expected', CASE WHEN NOT e.dynamic THEN 'static'
                                               WHEN e.fanned_out THEN 'fan-out'
                                               ELSE 'whole slot' END)
    FROM expected e
    WHERE NOT EXISTS (SELECT 1 FROM runner.job_runs r
                      WHERE r.job_name = e.job_name AND r.schedule_slot = e.slot
                        AND (e.partition_key IS NULL OR r.partition_key = e.partition_key))
      AND NOT EXISTS (SELECT 1 FROM listed m
                      WHERE m.job_name = e.job_name AND m.schedule_slot = e.slot
                        AND m.partition_key IS NOT DISTINCT FROM e.partition_key)

    UNION ALL
    -- a run in the tracked range that does not account for its slot, not listed with its id
    SELECT 'unlisted_gap', r.job_name, r.schedule_slot, r.partition_key, r.id, NULL,
           jsonb_build_object('problem', 'a run that does not account for its slot, not listed by runner.missing_slots',
                              'run_status', r.status)
    FROM runs r
    JOIN tracked t ON t.job_name = r.job_name
    CROSS JOIN clock c
    WHERE r.status IN ('pending', 'failed', 'dead', 'awaiting_approval')
      AND r.schedule_slot <= c.now
      AND NOT EXISTS (SELECT 1 FROM listed m WHERE m.run_id = r.id)

    UNION ALL
    SELECT 'running_without_attempt', r.job_name, r.schedule_slot, r.partition_key, r.id, a.id,
           jsonb_build_object('run_fence', r.fence, 'attempt_status', a.status,
                              'attempt_finished_at', a.finished_at)
    FROM runs r
    LEFT JOIN runner.attempts a ON a.run_id = r.id AND a.fence = r.fence
    WHERE r.status = 'running'
      AND (a.id IS NULL OR a.status <> 'running' OR a.finished_at IS NOT NULL)

    UNION ALL
    SELECT 'attempt_without_run_running', r.job_name, r.schedule_slot, r.partition_key, r.id, a.id,
           jsonb_build_object('run_status', r.status, 'run_fence', r.fence, 'attempt_fence', a.fence,
                              'owner_host', a.owner_host, 'owner_pid', a.owner_pid)
    FROM live_attempts a
    JOIN runs r ON r.id = a.run_id
    WHERE r.status <> 'running' OR r.fence <> a.fence

    UNION ALL
    SELECT 'orphaned_running', r.job_name, r.schedule_slot, r.partition_key, r.id, a.id,
           jsonb_build_object('lock_key', a.lock_key, 'owner_host', a.owner_host,
                              'owner_pid', a.owner_pid, 'owner_instance', a.owner_instance,
                              'started_at', a.started_at, 'heartbeat_at', a.heartbeat_at,
                              'run_status', r.status)
    FROM live_attempts a
    JOIN runs r ON r.id = a.run_id
    CROSS JOIN clock c
    WHERE a.heartbeat_at < c.now - check_v1.stale_after
      AND a.started_at < c.now - check_v1.stale_after
      AND NOT EXISTS (
          SELECT 1 FROM pg_catalog.pg_locks l
          WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 AND l.database = c.db
            AND l.classid = ((a.lock_key >> 32) & 4294967295)::oid
            AND l.objid = (a.lock_key & 4294967295)::oid)

    UNION ALL
    SELECT 'skipped_without_reason', r.job_name, r.schedule_slot, r.partition_key, r.id, NULL,
           jsonb_build_object('run_status', r.status, 'status_reason', r.status_reason)
    FROM runs r
    WHERE r.status IN ('skipped', 'coalesced', 'cancelled')
      AND coalesce(btrim(r.status_reason), '') = ''

    UNION ALL
    SELECT 'fence_behind', r.job_name, r.schedule_slot, r.partition_key, r.id, a.id,
           jsonb_build_object('run_fence', r.fence, 'attempt_fence', a.fence,
                              'attempt_status', a.status)
    FROM runs r
    JOIN runner.attempts a ON a.run_id = r.id AND a.fence > r.fence

    UNION ALL
    SELECT 'started_before_slot', r.job_name, r.schedule_slot, r.partition_key, r.id, a.id,
           jsonb_build_object('attempt_started_at', a.started_at, 'attempt_trigger', a.trigger,
                              'early_by_seconds', extract(epoch FROM r.schedule_slot - a.started_at),
                              'replay_group_id', r.replay_group_id)
    FROM runs r
    JOIN runner.attempts a ON a.run_id = r.id
    WHERE a.started_at < r.schedule_slot

    UNION ALL
    SELECT 'plan_completed_not_done', r.job_name, r.schedule_slot, r.partition_key, r.id, NULL,
           jsonb_build_object('backfill_id', b.id, 'plan_finished_at', b.finished_at,
                              'run_status', r.status, 'run_replay_group_id', r.replay_group_id,
                              'own_run', r.replay_group_id = b.replay_group_id,
                              'expected_runs', b.expected_runs)
    FROM runner.backfills b
    JOIN runner.backfills o
      ON o.job_name = b.job_name AND o.range_from < b.range_to AND b.range_from < o.range_to
    JOIN runs r ON r.replay_group_id = o.replay_group_id
    WHERE b.status = 'completed'
      AND r.job_name = b.job_name
      AND r.schedule_slot >= b.range_from AND r.schedule_slot < b.range_to
      AND (b.partitions IS NULL OR r.partition_key = ANY(b.partitions))
      AND r.status NOT IN ('succeeded', 'skipped', 'coalesced')
      AND r.updated_at <= b.finished_at

    UNION ALL
    SELECT 'cover_not_covered', r.job_name, r.schedule_slot, r.partition_key, r.id, NULL,
           jsonb_build_object('coalesced_into_slot', r.coalesced_into_slot, 'cover_run_id', t.id,
                              'cover_status', t.status)
    FROM runs r
    JOIN runner.job_runs t
      ON t.job_name = r.job_name AND t.schedule_slot = r.coalesced_into_slot
     AND t.partition_key = r.partition_key
    WHERE r.status = 'coalesced'
      AND t.status IN ('dead', 'awaiting_approval')
      AND NOT EXISTS (SELECT 1 FROM listed m WHERE m.run_id = r.id)

    UNION ALL
    SELECT 'stranded_run', r.job_name, r.schedule_slot, r.partition_key, r.id, NULL,
           jsonb_build_object('run_status', r.status, 'trigger', r.trigger,
                              'replay_group_id', r.replay_group_id, 'plan_status', b.status)
    FROM runs r
    LEFT JOIN runner.backfills b ON b.replay_group_id = r.replay_group_id
    WHERE r.status IN ('pending', 'failed') AND r.next_attempt_at IS NULL
      AND b.status IS DISTINCT FROM 'planned' AND b.status IS DISTINCT FROM 'running'
      AND b.status IS DISTINCT FROM 'paused'

    UNION ALL
    -- a checkpoint committed by a fence that did not own the run (revision 0009_checkpoints)
    SELECT 'checkpoint_not_owned', r.job_name, r.schedule_slot, r.partition_key, r.id, later.id,
           jsonb_build_object('checkpoint_fence', r.checkpoint_fence, 'run_fence', r.fence,
                              'checkpoint_at', r.checkpoint_at, 'run_checkpoints', r.checkpoints,
                              'writer_attempt', own.id,
                              'later_fence', later.fence,
                              'later_checkpoints_before', later.checkpoints_before)
    FROM runs r
    LEFT JOIN runner.attempts own ON own.run_id = r.id AND own.fence = r.checkpoint_fence
    LEFT JOIN LATERAL (
        SELECT a.id, a.fence, a.checkpoints_before FROM runner.attempts a
        WHERE a.run_id = r.id AND a.fence > r.checkpoint_fence AND a.checkpoints_before < r.checkpoints
        ORDER BY a.fence LIMIT 1) AS later ON true
    WHERE r.checkpoint_fence IS NOT NULL
      AND (r.checkpoint_fence > r.fence OR own.id IS NULL OR later.id IS NOT NULL)

    UNION ALL
    -- a confirmed effect key recorded again after its run was pruned: the key is kept in
    -- runner.effect_keys, and runner.effects holds it sent, confirmed, failed or unknown
    SELECT 'effect_key_twice', e.job_name, r.schedule_slot, e.partition_key, e.run_id, NULL,
           jsonb_build_object('effect_key', e.effect_key, 'kept_confirmed_at', k.confirmed_at,
                              'kept_job', k.job_name, 'status', e.status, 'send_count', e.send_count,
                              'sent_at', e.sent_at, 'confirmed_at', e.confirmed_at)
    FROM runner.effect_keys k
    JOIN runner.effects e ON e.effect_key = k.effect_key
    LEFT JOIN runner.job_runs r ON r.id = e.run_id
    WHERE e.status <> 'planned'
      AND (check_v1.since IS NULL OR coalesce(e.sent_at, e.updated_at) >= check_v1.since)

    UNION ALL
    -- a schedule history row nothing explains (its stamp, revision 0026_history)
    SELECT 'history_unexplained', s.job_name, s.valid_from, NULL, NULL, NULL,
           jsonb_build_object('valid_from', s.valid_from, 'recorded_at', s.recorded_at,
                              'explained_by', s.explained_by, 'fingerprint', s.fingerprint,
                              'schedule', runner.schedule_label_v1(s.schedule_kind, s.cron, s.every_interval,
                                                                    s.timezone, s.partitions,
                                                                    s.dynamic_partitions),
                              'problem', CASE
                                  WHEN s.fingerprint IS DISTINCT FROM f.fp
                                      THEN 'its fingerprint is not its definition''s (changed after it was written)'
                                  WHEN s.explained_by IS NULL
                                      THEN 'written by a role that is not the schema owner, neither by a runner''s sync nor in force from when it was written as the job''s synced definition'
                                  ELSE 'dated before it was recorded (back-dated), and not its job''s first row nor a runner''s re-assertion within 60 s' END)
    FROM runner.job_schedules s
    CROSS JOIN LATERAL (SELECT runner.schedule_fingerprint_v1(s.schedule_kind, s.cron, s.every_interval,
                                                              s.timezone, s.partitions,
                                                              s.dynamic_partitions) AS fp) f
    WHERE (s.explained_by IS NULL
           OR s.fingerprint IS DISTINCT FROM f.fp
           OR (s.valid_from < s.recorded_at
               AND NOT (s.explained_by IN ('first sync', 'append')
                        AND NOT EXISTS (SELECT 1 FROM runner.job_schedules e
                                        WHERE e.job_name = s.job_name AND e.valid_from < s.valid_from))
               AND NOT (s.explained_by LIKE 're-asserted by a running runner%'
                        AND s.valid_from >= s.recorded_at - interval '60 seconds')))
      AND (check_v1.since IS NULL OR s.valid_from >= check_v1.since OR s.recorded_at >= check_v1.since)
) AS v
ORDER BY v.invariant, v.job_name, v.schedule_slot, v.partition_key NULLS FIRST, v.run_id, v.attempt_id
$$;
