-- Named statements of the misfire duty (runner/misfire.py).

-- name: lock_job
-- Misfire decisions for one job are made by one process at a time: this row lock, held for
-- the decision's transaction, serialises them, and the next decider sees the rows written.
SELECT job_name, track_from FROM runner.jobs WHERE job_name = %(job_name)s FOR UPDATE

-- name: latest_decided_slot
-- The newest slot at or before the cutoff that already has a run (any status), else just
-- before the job's tracked range starts. Late slots are those after it, up to the cutoff.
-- (greatest, not coalesce: a run older than the tracked range, e.g. a backfill of slots
-- before the job was registered, must not make every slot since then late.)
SELECT greatest(
    (SELECT r.schedule_slot FROM runner.job_runs r
     WHERE r.job_name = %(job_name)s AND r.schedule_slot <= %(cutoff)s
     ORDER BY r.schedule_slot DESC LIMIT 1),
    (SELECT j.track_from - interval '1 microsecond' FROM runner.jobs j
     WHERE j.job_name = %(job_name)s)) AS latest

-- name: coalesced_window_starts
-- Where the window of a coalescing run must start: the oldest window it covers, per partition.
SELECT partition_key, min(window_start)
FROM runner.job_runs
WHERE job_name = %(job_name)s AND coalesced_into_slot = %(slot)s
GROUP BY partition_key

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
        status_reason, coalesced_into_slot, replay_group_id, updated_at)
    SELECT i.job_name, i.schedule_slot, i.partition_key, i.business_date, i.window_start,
           i.window_end, i.status, 'catch_up', i.idempotency_key, c.now,
           CASE WHEN i.status = 'pending' THEN c.now END,
           CASE WHEN i.status IN ('skipped', 'coalesced') THEN c.now END,
           i.reason, i.coalesced_into_slot,
           CASE WHEN i.status = 'pending' THEN %(replay_group_id)s::uuid END, c.now
    FROM input i CROSS JOIN clock c
    ON CONFLICT (job_name, schedule_slot, partition_key) DO NOTHING
    RETURNING r.status
)
SELECT status, count(*) FROM written GROUP BY status
