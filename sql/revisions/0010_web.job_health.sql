-- Frozen copy: runner.job_health as revision 0010_web ships it (its upgrade applies this file;
-- 0016_health's downgrade restores it). The live file is sql/views/job_health.sql.
-- runner.job_health: one row per registered job, the on-call dashboard (`runner status`).
-- Plain SQL on the ledger, usable from psql with no runner alive; "now" is the database's.
--
--   last_success_*          the run that most recently completed successfully: when it
--                           finished, its slot, business date and id
--   last_slot               the newest slot of the job in the ledger, and over its runs (one
--   last_slot_statuses      per partition): their statuses as {"status": count}, and the
--   last_processed/_failed  sum of their processed and failed counts
--   succeeded_24h           runs that succeeded in the last 24 hours (by finished_at)
--   failed_24h              runs waiting for a retry, last changed in the last 24 hours
--   dead_24h                runs that went dead in the last 24 hours (all dead runs are in
--                           runner.alerts until a human reruns or skips them)
--   oldest_unfinished_slot  the oldest due slot with a run still pending, running or failed
--   oldest_missing_slot     the oldest expected slot that never started (no run at all, or
--                           its fan-out failed: states never_started and fanout_failed of
--                           the gap scan): below the scan's watermark, the oldest hole it
--                           recorded (runner.gap_holes) that still has no run; above it,
--                           runner.missing_slots_v1 narrowed to the slots since the watermark
--   lag                     now minus the older of those two slots (0 when there is neither):
--                           how far behind the job is. Slots that never started count (since
--                           revision 0010_web): a job whose runners were all down for an hour
--                           is an hour behind even though no run of it is unfinished.
--   retired_at              when the job was retired (runner retire; revision 0009), NULL
--                           while it is not: its slots after that are not expected
--
-- The missing-slot count (runner.missing_slots) and the next slot (computed from the job's
-- definition in Python) are added by `runner status`.
CREATE OR REPLACE VIEW runner.job_health AS
SELECT j.job_name,
       j.options ->> 'owner' AS owner,
       j.paused,
       ls.finished_at AS last_success_at,
       ls.schedule_slot AS last_success_slot,
       ls.business_date AS last_success_business_date,
       ls.id AS last_success_run_id,
       lr.schedule_slot AS last_slot,
       lr.statuses AS last_slot_statuses,
       lr.processed AS last_processed,
       lr.failed AS last_failed,
       day.succeeded AS succeeded_24h,
       day.failed AS failed_24h,
       day.dead AS dead_24h,
       uf.oldest AS oldest_unfinished_slot,
       coalesce(now() - least(uf.oldest, ms.oldest), interval '0') AS lag,
       j.retired_at,
       ms.oldest AS oldest_missing_slot
FROM runner.jobs j
LEFT JOIN LATERAL (
    SELECT r.id, r.finished_at, r.schedule_slot, r.business_date
    FROM runner.job_runs r
    WHERE r.job_name = j.job_name AND r.status = 'succeeded'
    ORDER BY r.finished_at DESC
    LIMIT 1
) ls ON true
LEFT JOIN LATERAL (
    SELECT s.schedule_slot,
           jsonb_object_agg(s.status, s.runs) AS statuses,
           sum(s.processed)::bigint AS processed,
           sum(s.failed)::bigint AS failed
    FROM (
        SELECT r.schedule_slot, r.status, count(*) AS runs,
               sum(r.processed_count) AS processed, sum(r.failed_count) AS failed
        FROM runner.job_runs r
        WHERE r.job_name = j.job_name
          AND r.schedule_slot = (SELECT max(m.schedule_slot) FROM runner.job_runs m
                                 WHERE m.job_name = j.job_name)
        GROUP BY r.schedule_slot, r.status
    ) s
    GROUP BY s.schedule_slot
) lr ON true
CROSS JOIN LATERAL (
    SELECT (SELECT count(*) FROM runner.job_runs r
            WHERE r.job_name = j.job_name AND r.status = 'succeeded'
              AND r.finished_at >= now() - interval '24 hours') AS succeeded,
           (SELECT count(*) FROM runner.job_runs r
            WHERE r.job_name = j.job_name AND r.status = 'failed'
              AND r.updated_at >= now() - interval '24 hours') AS failed,
           (SELECT count(*) FROM runner.job_runs r
            WHERE r.job_name = j.job_name AND r.status = 'dead'
              AND r.finished_at >= now() - interval '24 hours') AS dead
) day
LEFT JOIN LATERAL (
    SELECT min(r.schedule_slot) AS oldest
    FROM runner.job_runs r
    WHERE r.job_name = j.job_name
      AND r.status IN ('pending', 'running', 'failed')
      AND r.schedule_slot <= now()
) uf ON true
LEFT JOIN runner.gap_watermarks w ON w.job_name = j.job_name AND w.track_from = j.track_from
LEFT JOIN LATERAL (
    -- below the gap scan's watermark: the oldest hole it recorded that still has no run; above
    -- it: the scan's never-started slots since the watermark (the scan narrowed to them, so
    -- its cost follows the slots since the last advance, not the ledger's age)
    SELECT least(
        (SELECT min(h.schedule_slot)
         FROM runner.gap_holes h
         WHERE h.job_name = j.job_name AND h.schedule_slot >= j.track_from
           AND NOT EXISTS (SELECT 1 FROM runner.job_runs r
                           WHERE r.job_name = h.job_name AND r.schedule_slot = h.schedule_slot
                             AND (h.whole_slot OR r.partition_key = h.partition_key))),
        (SELECT min(m.schedule_slot)
         FROM runner.missing_slots_v1(now(), j.job_name, w.complete_through) m
         WHERE m.state IN ('never_started', 'fanout_failed'))) AS oldest
    OFFSET 0  -- computed once per job (lag and oldest_missing_slot both use it)
) ms ON true;
