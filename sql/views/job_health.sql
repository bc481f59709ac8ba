-- runner.job_health: one row per registered job, the on-call dashboard (`runner status`).
-- Plain SQL on the ledger, usable from psql with no runner alive; "now" is the database's.
--
--   last_success_*          the live schedule's last success (revision 0008_watch): of the
--                           job's succeeded runs outside backfill plans (replay_group_id
--                           NULL), the one that completed last: when it finished, its slot,
--                           business date and id. A backfill of old slots finishing now does
--                           not make "last success" an old slot (before, its runs counted)
--   last_slot               the newest slot of the job in the ledger, and over its runs (one
--   last_slot_statuses      per partition): their statuses as {"status": count}, and the
--   last_processed/_failed  sum of their processed and failed counts
--   succeeded_24h           runs that succeeded in the last 24 hours (by finished_at)
--   failed_24h              runs waiting for a retry, last changed in the last 24 hours
--   dead_24h                runs that went dead in the last 24 hours (all dead runs are in
--                           runner.alerts until a human reruns or skips them)
--   oldest_unfinished_slot  the oldest due slot with a run of the live schedule still
--                           pending, running or failed (runs of backfill plans apart: below)
--   oldest_missing_slot     the oldest expected slot that never started (no run at all, or
--                           its fan-out failed: states never_started and fanout_failed of
--                           the gap scan): below the scan's watermark, the oldest hole it
--                           recorded (runner.gap_holes) that still has no run; above it, the
--                           oldest slot expanded since the watermark with no run
--   lag                     now minus the older of those two slots (0 when there is neither):
--                           how far behind the job's live schedule is. Slots that never
--                           started count (since revision 0010_web): a job whose runners were
--                           all down for an hour is an hour behind even though no run of it is
--                           unfinished; so do catch-up runs (the live schedule's missed slots,
--                           trigger catch_up). A backfill plan's runs do not (revision
--                           0008_watch): a plan re-running last month while every live slot
--                           succeeded left the job "hours behind"; its progress is below.
--   retired_at              when the job was retired (runner retire; revision 0009), NULL
--                           while it is not: its slots after that are not expected
--   missing                 the job's rows in the gap scan (runner.missing_slots: expected
--                           slots x partitions no run accounts for, in every state; revision
--                           0016_health, before which `runner status` counted them apart)
--   backfill_open           runs of backfill plans (replay_group_id set) still pending,
--   backfill_oldest_slot    running or failed, and the oldest slot among them: the plans'
--                           progress, apart from the lag (revision 0008_watch)
--   catch_up_open           runs of the live schedule catching up missed slots (trigger
--                           catch_up) still pending, running or failed (they count in lag)
--
-- The next slot (computed from the job's definition in Python) is added by `runner status`.
--
-- Cost (revision 0016_health). The body is runner.job_health_v1(only_job): one job by its
-- key, or every job. It calls the gap scan ONCE (runner.missing_slots_v1(ledger now, only_job):
-- every job's slots above its own watermark, its holes below, its unaccounted runs) and
-- groups its rows per job: oldest_missing_slot and missing come from that one pass. Before,
-- the view called the scan once per job in a lateral (about 1 ms a call: the executor
-- start-up of the scan's plan), which put the Jobs page at 1,000 jobs over its budget. The
-- other per-job parts are index probes in one plan (last success, last slot, the 24 hours'
-- counts on time-bounded indexes, the oldest unfinished run on job_runs_unfinished). So:
--   SELECT * FROM runner.job_health                        every job, one pass
--   SELECT * FROM runner.job_health_v1('nightly')          one job, reading only its rows
-- (the view filtered by job_name still answers right, at the cost of every job's pass: no
-- filter reaches inside a function; `runner status --job` and the console call the function).
-- JIT is off in the function (its plan's estimates are large defaults: compiling costs more
-- than running it).
-- Its columns grew in revision 0008_watch (the backfill and catch-up ones, last): the
-- function and the view are dropped and made again (nothing else is built on them).
DROP VIEW IF EXISTS runner.job_health;
DROP FUNCTION IF EXISTS runner.job_health_v1(text);
CREATE FUNCTION runner.job_health_v1(only_job text DEFAULT NULL)
RETURNS TABLE (
    job_name text, owner text, paused boolean, last_success_at timestamptz,
    last_success_slot timestamptz, last_success_business_date date, last_success_run_id bigint,
    last_slot timestamptz, last_slot_statuses jsonb, last_processed bigint, last_failed bigint,
    succeeded_24h bigint, failed_24h bigint, dead_24h bigint, oldest_unfinished_slot timestamptz,
    lag interval, retired_at timestamptz, oldest_missing_slot timestamptz, missing bigint,
    backfill_open bigint, backfill_oldest_slot timestamptz, catch_up_open bigint)
LANGUAGE sql STABLE PARALLEL RESTRICTED
SET jit = off
AS $$
WITH gaps AS MATERIALIZED (
    -- the gap scan, once for every job (or the one job): below each job's watermark the holes
    -- it recorded, above it the slots expanded since, and its runs not accounting for a slot
    SELECT m.job_name, count(*) AS missing,
           min(m.schedule_slot) FILTER (WHERE m.state IN ('never_started', 'fanout_failed')) AS oldest
    FROM runner.missing_slots_v1((SELECT runner.ledger_now_v1()), only_job) m
    GROUP BY m.job_name
)
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
       coalesce((SELECT runner.ledger_now_v1()) - least(uf.oldest, ms.oldest), interval '0') AS lag,
       j.retired_at,
       ms.oldest AS oldest_missing_slot,
       coalesce(ms.missing, 0) AS missing,
       uf.backfill_open,
       uf.backfill_oldest AS backfill_oldest_slot,
       uf.catch_up_open
FROM (SELECT o.* FROM runner.jobs o WHERE o.job_name = only_job
      UNION ALL
      SELECT a.* FROM runner.jobs a WHERE only_job IS NULL) j
LEFT JOIN LATERAL (
    -- the last completed success outside backfill plans (on job_runs_succeeded)
    SELECT r.id, r.finished_at, r.schedule_slot, r.business_date
    FROM runner.job_runs r
    WHERE r.job_name = j.job_name AND r.status = 'succeeded' AND r.replay_group_id IS NULL
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
              AND r.finished_at >= (SELECT runner.ledger_now_v1()) - interval '24 hours') AS succeeded,
           (SELECT count(*) FROM runner.job_runs r
            WHERE r.job_name = j.job_name AND r.status = 'failed'
              AND r.updated_at >= (SELECT runner.ledger_now_v1()) - interval '24 hours') AS failed,
           (SELECT count(*) FROM runner.job_runs r
            WHERE r.job_name = j.job_name AND r.status = 'dead'
              AND r.finished_at >= (SELECT runner.ledger_now_v1()) - interval '24 hours') AS dead
) day
CROSS JOIN LATERAL (
    -- the unfinished runs (on job_runs_unfinished): the live schedule's oldest, and the
    -- backfill plans' and catch-up runs' progress apart
    SELECT min(r.schedule_slot) FILTER (WHERE r.replay_group_id IS NULL) AS oldest,
           count(*) FILTER (WHERE r.replay_group_id IS NOT NULL) AS backfill_open,
           min(r.schedule_slot) FILTER (WHERE r.replay_group_id IS NOT NULL) AS backfill_oldest,
           count(*) FILTER (WHERE r.replay_group_id IS NULL AND r.trigger = 'catch_up') AS catch_up_open
    FROM runner.job_runs r
    WHERE r.job_name = j.job_name
      AND r.status IN ('pending', 'running', 'failed')
      AND r.schedule_slot <= (SELECT runner.ledger_now_v1())
) uf
LEFT JOIN gaps ms ON ms.job_name = j.job_name
$$;

CREATE OR REPLACE VIEW runner.job_health AS
SELECT h.* FROM runner.job_health_v1() h;
