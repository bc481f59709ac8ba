-- runner.missing_slots: the gap scan. Plain SQL on the ledger, usable from psql with no runner
-- alive: every expected slot x partition in each job's tracked range that no run accounts for,
-- with its state.
--
-- Expected slots. A job's tracked range is [runner.jobs.track_from, now()] (track_from is when
-- the job was first registered, or its explicit track_from). Its schedule history is
-- runner.job_schedules: a slot s is judged by the history row with the greatest
-- valid_from <= s (a schedule change applies to slots at or after the change), and by the
-- earliest row when s precedes every row (track_from moved earlier than the first
-- registration). Under that row, s must be a slot of its schedule (cron in its zone, or
-- every=; runner.schedule_slots_v1, the SQL twin of runner/schedule.py), and:
--   * an unpartitioned job expects partition '';
--   * a job with static partitions (job_schedules.partitions) expects each of them;
--   * a job with dynamic partitions (a callable: which keys it returns is known only to the
--     code) expects the partitions recorded in runner.slot_fanouts when the slot was first
--     fanned out (before any of its runs was claimed), each of them; a slot with no recorded
--     fan-out (never fanned out, or fanned out by a runner older than revision 0006) expects
--     at least one run: with no run at all it shows ONCE with partition_key NULL.
-- A slot whose fan-out failed (a user callable raised, returned too many or unstorable keys;
-- the error is in runner.slot_fanouts) shows with state fanout_failed and the error.
--
-- Slots coalesced into a run that did not cover them. A coalesced run accounts for its slot
-- only through its covering run: while that run is dead or awaiting approval, the coalesced
-- run is listed too, with the cover's state and a status_reason naming it (run_id is the
-- coalesced run's; rerunning the cover, or the coalesced run itself, covers the slot).
--
-- Runs before the tracked range. A run that does not account for its slot is listed even
-- when its slot precedes track_from (a backfill of the history before the job was
-- registered, whose run failed or died): only expected slots are bounded by track_from.
--
-- Accounted for. A slot x partition is accounted for by a run in status succeeded, skipped
-- (with its reason), coalesced (pointing to the run that covered it) or cancelled (an
-- operator's explicit, audited decision). The view lists every expected slot x partition
-- with no run at all, and every run in the tracked range that is in any other status -- also
-- one at a slot or partition its schedule no longer expects (a run left failed or dead across
-- a schedule change still needs a decision). `state` says which:
--   never_started      no run at all (e.g. missed while every runner was down)
--   fanout_failed      no run, because computing the slot's partitions or window failed
--   pending            queued (a rerun, a backfill, an approved slot, a released attempt)
--   running            an attempt is running and heartbeating
--   running_stale      running, but the attempt's heartbeat is older than the job's lease
--                      (runner.jobs.options->'lease_seconds', 5 minutes when absent)
--   failed             waiting for a retry (next_attempt_at)
--   dead               out of automatic attempts: needs a human (rerun, skip)
--   awaiting_approval  held by misfire="manual" or a capped replay
--
-- Retired jobs (runner retire, revision 0009): slots after the retirement instant and before
-- an unretirement are not expected (runner.job_retirements, through runner.tracked_spans_v1);
-- slots before it still are, and runs that do not account for their slot are listed wherever
-- they are (a run left failed or dead by a retired job still needs a decision).
--
-- Paused jobs are listed like any other, with paused = true: a paused job's slots are
-- genuinely not done, and pausing is visible rather than a silent gap. Filter on `paused`
-- to leave them out.
--
-- Columns: job_name, schedule_slot (the UTC instant), local_slot (its wall time in the job's
-- current zone), partition_key, state, run_id (NULL when never started), attempt,
-- next_attempt_at, heartbeat_at (running attempts), last_error, status_reason, lateness
-- (now() - schedule_slot), paused. A slot exactly at now() is expected; one after is not.
--
-- Cost. Expanding every slot since track_from would grow with the ledger's age, so each job
-- has a watermark (runner.gap_watermarks, moved by runner.advance_watermarks_v1(): see that
-- file). Slots without any run come from expanding the schedule above the watermark and, at
-- or below it, from the holes the advance recorded (runner.gap_holes) that still have no run.
-- Runs not accounted for come, over the whole tracked range, from the partial index
-- job_runs_unaccounted. So the cost follows the size of the answer and the time since the
-- last advance, not the ledger's size. Because the watermark is about runs existing, in any
-- status, a rerun or backfill that reopens an old run (succeeded -> pending) needs no change
-- to it: the reopened run is in the partial index and shows at once. Pruning (runner.prune_v1)
-- deletes only runs that are accounted for, only below the watermark, and records how far it
-- went (gap_watermarks.pruned_through): the scan never expands slots at or below that again,
-- so a pruned run never makes its slot look missing.
--
-- One call for every job (only_job NULL) takes each job's own watermark: per job a few index
-- probes (its watermark, schedule rows, retirements), per slot since the watermark and per
-- recorded hole one probe for a run, per unaccounted run one row, and per dead or held run
-- one probe for the runs coalesced into it. runner.job_health_v1 makes that one call for all
-- jobs and groups the rows (revision 0016_health), where the view made one call per job:
-- each call's executor start-up cost more than its answer. The same
-- revision reads a job's holes by its key and looks up retired spans only for a job that was
-- ever retired (same rows: an unretired job's one span is all of time); before, every call,
-- even for one job, checked the spans of every hole of every job.
--
-- runner.missing_slots_v1(as_of, only_job, since) is the same scan at a given "now"
-- (tests, and `runner gaps --job/--since`, which it narrows cheaply); the view is its call at
-- now(). A new run status must be placed on one side: in the status list below and in the
-- predicate of job_runs_unaccounted (sql/schema/0001_baseline.sql).

CREATE OR REPLACE FUNCTION runner.missing_slots_v1(
    as_of timestamptz, only_job text DEFAULT NULL, since timestamptz DEFAULT NULL)
RETURNS TABLE (
    job_name text, schedule_slot timestamptz, local_slot timestamp, partition_key text,
    state text, run_id bigint, attempt integer, next_attempt_at timestamptz,
    heartbeat_at timestamptz, last_error text, status_reason text, lateness interval,
    paused boolean)
LANGUAGE sql STABLE PARALLEL RESTRICTED
-- JIT compiling this plan costs more (a few hundred ms) than running it: the nested slot
-- expansions carry large default row estimates that push its cost over jit_above_cost.
SET jit = off
AS $$
WITH jobs AS MATERIALIZED (
    SELECT j.job_name, j.paused, j.timezone AS job_zone,
           -- whether the job was ever retired: only then are its spans worth computing
           -- (revision 0016_health: an unretired job has one span, all of time)
           EXISTS (SELECT 1 FROM runner.job_retirements x WHERE x.job_name = j.job_name) AS retired,
           CASE WHEN jsonb_typeof(j.options -> 'lease_seconds') = 'number'
                THEN make_interval(secs => (j.options ->> 'lease_seconds')::float8)
                ELSE interval '5 minutes' END AS lease,
           greatest(j.track_from, since) AS first_slot,
           -- the watermark, trusted only below a schedule row it did not see; never below
           -- what retention pruned (revision 0009: nothing there is expanded again)
           greatest(
               CASE WHEN w.complete_through IS NOT NULL THEN least(
                   w.complete_through, as_of,
                   (SELECT min(s.valid_from) FROM runner.job_schedules s
                    WHERE s.job_name = j.job_name
                      AND s.valid_from > coalesce(w.schedule_from, timestamptz '-infinity'))
                   - interval '1 microsecond')
               END,
               (SELECT CASE WHEN p.pruned_through IS NOT NULL THEN least(p.pruned_through, as_of) END
                FROM runner.gap_watermarks p
                WHERE p.job_name = j.job_name)) AS wm
    -- one job by its key, or every job: two branches, not "only_job IS NULL OR job_name =
    -- only_job", which no index serves (this body is planned once for any only_job), so that
    -- a call for one job (runner.job_health makes one per job) reads that job's rows, not
    -- every job's (revision 0014_webperf)
    FROM (SELECT o.* FROM runner.jobs o WHERE o.job_name = only_job
          UNION ALL
          SELECT a.* FROM runner.jobs a WHERE only_job IS NULL) j
    -- (LIMIT 1: a probe by key per job, never a hash of every job's watermark)
    LEFT JOIN LATERAL (SELECT m.complete_through, m.schedule_from FROM runner.gap_watermarks m
                       WHERE m.job_name = j.job_name AND m.track_from = j.track_from
                       LIMIT 1) w ON true
), segments AS (
    -- each schedule row's share of (watermark, as_of]: slots s with lo < s <= hi, within
    -- the spans the job was not retired (runner.tracked_spans_v1)
    SELECT j.job_name, j.paused, j.job_zone, s.schedule_kind, s.cron, s.every_interval,
           s.timezone, s.partitions, s.dynamic_partitions,
           greatest(s.lo, j.first_slot - interval '1 microsecond', j.wm, t.lo) AS lo,
           least(s.hi, as_of, t.hi) AS hi
    FROM jobs j
    CROSS JOIN LATERAL (SELECT r.lo, r.hi FROM runner.tracked_spans_v1(j.job_name) AS r WHERE j.retired
                        UNION ALL
                        SELECT timestamptz '-infinity', timestamptz 'infinity' WHERE NOT j.retired) AS t
    CROSS JOIN LATERAL (
        SELECT h.*,
               CASE WHEN lag(h.valid_from) OVER w IS NULL THEN timestamptz '-infinity'
                    ELSE h.valid_from - interval '1 microsecond' END AS lo,
               coalesce(lead(h.valid_from) OVER w - interval '1 microsecond',
                        timestamptz 'infinity') AS hi
        FROM runner.job_schedules h
        WHERE h.job_name = j.job_name
        WINDOW w AS (ORDER BY h.valid_from)
    ) AS s
), never_started AS (
    -- above the watermark: expected slots x partitions without any run (LATERAL: one index
    -- probe per slot x partition, never a hash anti-join that would read every run of the
    -- ledger because the slot estimates are large defaults). The probe is runner.slot_run_v1,
    -- inlined: a partition's seeks the whole key, where `p.key IS NULL OR r.partition_key =
    -- p.key` sought (job, slot) and read the slot's runs until it met the partition (issue 32)
    SELECT g.job_name, x.slot, p.key AS partition_key, g.paused, g.job_zone, f.error
    FROM segments g
    CROSS JOIN LATERAL runner.schedule_slots_v1(
        g.schedule_kind, g.cron, g.every_interval, g.timezone, g.lo, g.hi) AS x(slot)
    LEFT JOIN runner.slot_fanouts f ON f.job_name = g.job_name AND f.schedule_slot = x.slot
    CROSS JOIN LATERAL unnest(CASE WHEN NOT g.dynamic_partitions THEN coalesce(g.partitions, ARRAY[''])
                                   WHEN f.job_name IS NOT NULL AND f.error IS NULL THEN f.partitions
                                   ELSE ARRAY[NULL::text] END) AS p(key)
    LEFT JOIN LATERAL runner.slot_run_v1(g.job_name, x.slot, p.key) AS run(found) ON true
    WHERE g.lo < g.hi AND run.found IS NULL
    UNION ALL
    -- at or below it: the holes the advance recorded that still have no run (a whole-slot
    -- hole of a slot whose fan-out was recorded after the advance: each recorded partition)
    -- (each job's holes by its key, LATERAL: a call for one job reads that job's holes, never
    -- every job's; the retired spans are looked at only for a job ever retired: revision
    -- 0016_health, before which every hole of every job ran that lookup on every call)
    SELECT h.job_name, h.schedule_slot, p.key, j.paused, j.job_zone, f.error
    FROM jobs j
    CROSS JOIN LATERAL (SELECT o.* FROM runner.gap_holes o
                        WHERE o.job_name = j.job_name
                          AND o.schedule_slot <= j.wm AND o.schedule_slot >= j.first_slot) AS h
    LEFT JOIN runner.slot_fanouts f ON f.job_name = h.job_name AND f.schedule_slot = h.schedule_slot
    CROSS JOIN LATERAL unnest(CASE WHEN NOT h.whole_slot THEN ARRAY[h.partition_key]
                                   WHEN f.job_name IS NOT NULL AND f.error IS NULL THEN f.partitions
                                   ELSE ARRAY[NULL::text] END) AS p(key)
    WHERE (NOT j.retired
           OR EXISTS (SELECT 1 FROM runner.tracked_spans_v1(h.job_name) AS t
                      WHERE h.schedule_slot > t.lo AND h.schedule_slot <= t.hi))
      AND NOT EXISTS (SELECT 1 FROM runner.slot_run_v1(h.job_name, h.schedule_slot, p.key))
)
SELECT n.job_name, n.slot, timezone(n.job_zone, n.slot), n.partition_key,
       CASE WHEN n.error IS NULL THEN 'never_started' ELSE 'fanout_failed' END,
       NULL::bigint, NULL::integer, NULL::timestamptz, NULL::timestamptz, n.error, NULL::text,
       as_of - n.slot, n.paused
FROM never_started n
UNION ALL
-- runs in the tracked range that do not account for their slot, from the partial index
SELECT r.job_name, r.schedule_slot, timezone(j.job_zone, r.schedule_slot), r.partition_key,
       CASE WHEN r.status = 'running'
                 AND coalesce(a.heartbeat_at, r.started_at) < as_of - j.lease THEN 'running_stale'
            ELSE r.status
       END,
       r.id, r.attempt, r.next_attempt_at, a.heartbeat_at, r.last_error, r.status_reason,
       as_of - r.schedule_slot, j.paused
FROM jobs j
JOIN runner.job_runs r ON r.job_name = j.job_name
-- the attempt's heartbeat, read for running runs only (revision 0025_scan): as a plain LEFT
-- JOIN the status test was one more join condition, and every unaccounted run (mostly failed
-- and dead ones, all over the ledger's history) paid an attempts_run_fence probe: 27 % of
-- the scan's buffers on a 30M-run ledger, and half its reads from outside shared_buffers.
-- Here it is a one-time filter of the subquery, tested before the probe (OFFSET 0 keeps the
-- planner from flattening it back into the join).
LEFT JOIN LATERAL (SELECT x.heartbeat_at FROM runner.attempts x
                   WHERE r.status = 'running' AND x.run_id = r.id AND x.fence = r.fence
                   OFFSET 0) a ON true
WHERE r.status IN ('pending', 'running', 'failed', 'dead', 'awaiting_approval')
  -- wherever the slot is since `since`, also before track_from: a backfill of history before
  -- the job was registered leaves runs there, and a failed or dead one still needs a decision
  -- (issue 26); nothing expected is expanded there
  AND r.schedule_slot >= coalesce(since, timestamptz '-infinity')
  AND r.schedule_slot <= as_of
UNION ALL
-- coalesced runs whose covering run is dead or awaiting approval: their slots are not covered
-- until it succeeds (issue 26). Listed with the cover's state, the coalesced run's id, and a
-- reason naming the cover. From each job's covers (the partial index job_runs_unaccounted)
-- to the runs coalesced into each of them (job_runs_coalesced_into, its whole key), both
-- LATERAL with OFFSET 0 so that the planner keeps that order: as a plain join, the estimate
-- for the slot range (parameters, never their values) was a few rows, and it started from
-- every coalesced run of the ledger instead, ANDing job_runs_coalesced_into with the whole
-- of job_runs_slot_order: 96,629 buffers read from outside shared_buffers on a 10M-run
-- ledger, growing with it (commit 08dcdb4; the archive of benchmarks, 2026-12-04).
SELECT c.job_name, c.schedule_slot, timezone(j.job_zone, c.schedule_slot), c.partition_key,
       r.status, c.id, c.attempt, NULL::timestamptz, NULL::timestamptz, r.last_error,
       format('coalesced into the run of %s (run %s), which is %s: covered once it succeeds',
              r.schedule_slot, r.id, r.status),
       as_of - c.schedule_slot, j.paused
FROM jobs j
CROSS JOIN LATERAL (SELECT v.id, v.schedule_slot, v.partition_key, v.status, v.last_error
                    FROM runner.job_runs v
                    WHERE v.job_name = j.job_name AND v.status IN ('dead', 'awaiting_approval')
                    OFFSET 0) r
CROSS JOIN LATERAL (SELECT k.job_name, k.schedule_slot, k.partition_key, k.id, k.attempt
                    FROM runner.job_runs k
                    WHERE k.job_name = j.job_name AND k.coalesced_into_slot = r.schedule_slot
                      AND k.partition_key = r.partition_key AND k.status = 'coalesced'
                      AND k.schedule_slot >= coalesce(since, timestamptz '-infinity')
                      AND k.schedule_slot <= as_of
                    OFFSET 0) c
$$;

CREATE OR REPLACE VIEW runner.missing_slots AS
SELECT * FROM runner.missing_slots_v1((SELECT runner.ledger_now_v1()));
