-- Named statements of the misfire duty (runner/misfire.py).

-- name: lock_job
-- Misfire decisions for one job are made by one process at a time: this row lock, held for
-- the decision's transaction, serialises them, and the next decider sees the rows written.
-- FOR NO KEY UPDATE, not FOR UPDATE: it must not conflict with the KEY SHARE locks that
-- inserts of rows referencing the job take (claims' runs, the gap scan's holes), or a long
-- watermark advance would stall the loop thread here, and this lock would hold up claims.
-- Also returns since when the job's current schedule is in force: late slots before that
-- were due under an earlier schedule, which the gap scan judges them by; they are not decided
-- here with the new one.
SELECT j.job_name, j.track_from, j.paused,
       (SELECT max(s.valid_from) FROM runner.job_schedules s WHERE s.job_name = j.job_name) AS valid_from
FROM runner.jobs j WHERE j.job_name = %(job_name)s FOR NO KEY UPDATE OF j

-- name: latest_complete_slot
-- Where a runner's first range of late slots starts (runner/misfire.py): the newest slot at
-- or before the cutoff whose runs cover every partition it expects (static partitions, the
-- recorded fan-out of a dynamic job, or one run), looking back at most 50 slots that have
-- runs; a partly claimed slot (a shutdown between claims) is then decided too. NULL: no
-- complete slot among them (the range starts at the oldest of them) or no run at all.
WITH recent AS (
    SELECT r.schedule_slot, count(*) AS n
    FROM runner.job_runs r
    WHERE r.job_name = %(job_name)s AND r.schedule_slot <= %(cutoff)s
      AND r.schedule_slot >= %(track_from)s
    GROUP BY r.schedule_slot
    ORDER BY r.schedule_slot DESC
    LIMIT 50
)
SELECT (SELECT max(c.schedule_slot) FROM recent c
        LEFT JOIN runner.slot_fanouts f
               ON f.job_name = %(job_name)s AND f.schedule_slot = c.schedule_slot
        WHERE c.n >= coalesce(cardinality(f.partitions), %(expected)s)) AS complete,
       (SELECT min(schedule_slot) FROM recent) AS oldest,
       (SELECT count(*) FROM recent) AS groups

-- name: expected_slots
-- The job's expected slots in [first, last], oldest first: runner.expected_slots_v1, the one
-- definition (its schedule history, tracked, not retired, not paused -- a slot that fell due
-- while the job was paused is not late --, due by now).
SELECT schedule_slot
FROM runner.expected_slots_v1(%(job_name)s, %(first)s::timestamptz, %(last)s::timestamptz,
                              %(now)s::timestamptz)
WHERE NOT paused
ORDER BY schedule_slot

-- name: outage
-- How long a job has been missing since an instant: the expected time (runner.expected_spans_v1:
-- tracked, not retired, not paused) between it and now. A pause is not an outage: a range's
-- lateness, which picks its misfire tier, does not count paused (or retired) time.
SELECT coalesce(sum(upper(x.span) - lower(x.span)), interval '0')
FROM runner.expected_spans_v1(%(job_name)s, %(now)s::timestamptz) AS e
CROSS JOIN LATERAL (SELECT e.span * tstzrange(least(%(since)s::timestamptz, %(now)s::timestamptz),
                                              %(now)s::timestamptz, '[]') AS span) AS x
WHERE NOT e.paused AND NOT isempty(x.span)

-- name: range_ruling
-- The ruling of an open range of the job starting at this slot (runner.misfire_ranges,
-- 0004_expected), if another runner wrote one: the same downtime is decided by one ruling.
SELECT tier, action, lateness
FROM runner.misfire_ranges
WHERE job_name = %(job_name)s AND first_slot = %(first)s AND closed_at IS NULL

-- name: open_range
-- A late range's row, written when its first pass leaves slots for later passes (a range
-- decided in one transaction needs none): where the next pass starts, and the ruling (misfire
-- tiers; NULLs for a single policy). A row of the same first slot already there is taken over
-- as this range's (a closed one: a range long done).
INSERT INTO runner.misfire_ranges AS m (job_name, first_slot, last_slot, next_slot, tier, action, lateness)
VALUES (%(job_name)s, %(first)s, %(last)s, %(next)s, %(tier)s, %(action)s, %(lateness)s::interval)
ON CONFLICT (job_name, first_slot) DO UPDATE
SET last_slot = EXCLUDED.last_slot, next_slot = EXCLUDED.next_slot, tier = EXCLUDED.tier,
    action = EXCLUDED.action, lateness = EXCLUDED.lateness, closed_at = NULL

-- name: advance_range
-- Where a range's next pass starts (NULL: every slot of it decided, and it is closed).
UPDATE runner.misfire_ranges
SET next_slot = %(next)s::timestamptz,
    closed_at = CASE WHEN %(next)s::timestamptz IS NULL THEN now() END
WHERE job_name = %(job_name)s AND first_slot = %(key)s AND closed_at IS NULL

-- name: open_ranges
-- The open late ranges of the given jobs, oldest first: a starting runner resumes them, with
-- their ruling, before it decides its own downtime.
SELECT job_name, first_slot, last_slot, next_slot, tier, action, lateness
FROM runner.misfire_ranges
WHERE job_name = ANY(%(job_names)s::text[]) AND closed_at IS NULL
ORDER BY job_name, first_slot

-- name: runs_at
-- Which of the given slot x partitions of a job already have a run (any status).
SELECT r.schedule_slot, r.partition_key
FROM unnest(%(slots)s::timestamptz[], %(partition_keys)s::text[]) AS t(schedule_slot, partition_key)
JOIN runner.job_runs r ON r.job_name = %(job_name)s AND r.schedule_slot = t.schedule_slot
                      AND r.partition_key = t.partition_key

-- name: coalesce_targets
-- The runs at a range's newest slot that late slots may be coalesced into: a coalesced row
-- may only point at a run that will cover its window (same partition, started no later
-- than its window, and not itself skipped, coalesced or cancelled).
SELECT partition_key, window_start
FROM runner.job_runs
WHERE job_name = %(job_name)s AND schedule_slot = %(slot)s
  AND partition_key = ANY(%(partition_keys)s::text[])
  AND status NOT IN ('skipped', 'coalesced', 'cancelled')

-- name: record_decisions
-- Write misfire decisions as runs (pending ones tagged with the replay plan's group, when
-- the job verifies its replays): skipped, coalesced and awaiting_approval rows are final
-- until an operator acts; pending rows (trigger catch_up) are started by the loop. Rows that
-- already exist are left alone (another process decided, or the slot ran).
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
), input AS (
    SELECT *
    FROM unnest(%(job_names)s::text[], %(slots)s::timestamptz[], %(partition_keys)s::text[],
                %(business_dates)s::date[], %(window_starts)s::timestamptz[],
                %(window_ends)s::timestamptz[], %(idempotency_keys)s::text[],
                %(statuses)s::text[], %(reasons)s::text[], %(coalesced_into)s::timestamptz[])
         AS t(job_name, schedule_slot, partition_key, business_date, window_start, window_end,
              idempotency_key, status, reason, coalesced_into_slot)
), written AS (
    INSERT INTO runner.job_runs AS r (
        job_name, schedule_slot, partition_key, business_date, window_start, window_end,
        status, trigger, idempotency_key, scheduled_at, next_attempt_at, finished_at,
        status_reason, coalesced_into_slot, replay_group_id, lane, updated_at)
    SELECT i.job_name, i.schedule_slot, i.partition_key, i.business_date, i.window_start,
           i.window_end, i.status, 'catch_up', i.idempotency_key, c.now,
           CASE WHEN i.status = 'pending' THEN c.now END,
           CASE WHEN i.status IN ('skipped', 'coalesced') THEN c.now END,
           i.reason, i.coalesced_into_slot,
           CASE WHEN i.status = 'pending' THEN %(replay_group_id)s::uuid END,
           'correction', c.now  -- replays of late slots are the correction lane's (0011_lanes)
    FROM input i CROSS JOIN clock c
    -- no decision for a slot that is not expected (runner.expected_spans_v1: retired, paused,
    -- untracked or not yet due). The duty chose expected slots under the job's row lock, which
    -- `runner retire` and `runner pause` wait for, so this only guards against a caller's
    -- mistake; the rows are all of one job (misfire.py), whose spans are read once.
    WHERE EXISTS (SELECT 1 FROM runner.expected_spans_v1((%(job_names)s::text[])[1], c.now) AS e
                  WHERE NOT e.paused AND e.span @> i.schedule_slot
                    AND i.job_name = (%(job_names)s::text[])[1])
    ON CONFLICT (job_name, schedule_slot, partition_key) DO NOTHING
    RETURNING r.id, r.job_name, r.schedule_slot, r.partition_key, r.status, r.status_reason
), decided AS (
    -- misfire tiers (runner/tiers.py): which tier decided each row written, and why
    INSERT INTO runner.misfire_decisions (run_id, job_name, schedule_slot, partition_key, tier,
                                          action, lateness, slot_lateness, alert, reason, decided_at)
    SELECT w.id, w.job_name, w.schedule_slot, w.partition_key, %(tier)s::text, %(tier_action)s::text,
           %(lateness)s::interval, c.now - w.schedule_slot, %(tier_alert)s::boolean, w.status_reason, c.now
    FROM written w CROSS JOIN clock c
    WHERE %(tier)s::text IS NOT NULL
)
SELECT status, count(*) FROM written GROUP BY status

-- name: record_replay_plan
-- The plan of a job's replayed runs (misfire="replay" with verify=): runner.record_replay_plan_v1,
-- the one kind of plan a runner may make (the worker role cannot insert plans). Returns its
-- replay_group_id.
SELECT runner.record_replay_plan_v1(%(job_name)s, %(range_from)s::timestamptz, %(range_to)s::timestamptz,
                                    %(expected_runs)s, %(reason)s, %(now)s::timestamptz) AS replay_group_id

-- name: unresolved_effects
-- The runs of a job whose attempts left effects of unknown delivery (runner/effects.py: sent,
-- or unknown), with their slot and idempotency key: a job with side_effects=True in its
-- misfire tiers holds for approval the late slots they concern (runner/misfire.py:
-- Ruling.held_for). An effect whose run is gone (pruned: run_id NULL) concerns no slot.
SELECT r.schedule_slot, r.idempotency_key, count(*)::int, min(e.effect_key)
FROM runner.effects e
JOIN runner.job_runs r ON r.id = e.run_id
WHERE e.job_name = %(job_name)s AND e.status IN ('sent', 'unknown')
GROUP BY r.schedule_slot, r.idempotency_key
ORDER BY r.schedule_slot DESC
LIMIT %(limit)s

-- name: tier_backfill
-- The plan of a backfill tier (runner.tier_backfill_v1: the stored tier's options, through
-- runner.create_backfill_v1, audited). Returns the plan's id, the request's id, runs inserted.
SELECT backfill_id, request_id, inserted
FROM runner.tier_backfill_v1(%(job_name)s, %(tier)s, %(lateness)s::interval, %(slots)s::timestamptz[],
                             %(partition_keys)s::text[], %(business_dates)s::date[],
                             %(window_starts)s::timestamptz[], %(window_ends)s::timestamptz[],
                             %(idempotency_keys)s::text[], %(reason)s, %(now)s::timestamptz)
