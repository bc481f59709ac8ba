-- misfire_tier: missed slots a tier that alerts sent to a backfill plan not finished yet, or
-- held for approval and not decided yet (revision 0012_tiers)
-- One kind of runner.alerts (sql/views/alerts.sql; the kinds: runner/alerts.py).
CREATE OR REPLACE VIEW runner.alert_misfire_tier AS
SELECT a.kind::text AS kind, a.job_name::text AS job_name, a.owner::text AS owner, a.run_id::bigint AS run_id,
       a.detail::text AS detail, a.since::timestamptz AS since
FROM (
    SELECT 'misfire_tier',
           d.job_name,
           job.owner,
           min(d.run_id),
           CASE WHEN d.backfill_id IS NOT NULL
                THEN format('missed for %s (%s slot(s), %s to %s): misfire tier %L created backfill %s '
                            '(lane %s, %s run(s), %s)', justify_interval(date_trunc('second', max(d.lateness))),
                            count(DISTINCT d.schedule_slot), min(d.schedule_slot), max(d.schedule_slot),
                            d.tier, d.backfill_id, b.lane, count(*), b.status)
                ELSE format('missed for %s (%s slot(s), %s to %s): misfire tier %L holds %s run(s) awaiting '
                            'approval: runner approve %s --from ... --to ... --reason ... (or runner skip)',
                            justify_interval(date_trunc('second', max(d.lateness))),
                            count(DISTINCT d.schedule_slot), min(d.schedule_slot), max(d.schedule_slot),
                            d.tier, count(*), d.job_name)
           END,
           min(d.decided_at)
    FROM runner.misfire_decisions d
    JOIN runner.job_runs r ON r.id = d.run_id
    LEFT JOIN runner.backfills b ON b.id = d.backfill_id
    LEFT JOIN runner.alert_jobs job ON job.job_name = d.job_name
    WHERE d.alert
      AND ((d.backfill_id IS NOT NULL AND b.status IN ('planned', 'running', 'paused'))
           OR (d.backfill_id IS NULL AND r.status = 'awaiting_approval'))
    GROUP BY d.job_name, job.owner, d.tier, d.backfill_id, b.lane, b.status
) AS a (kind, job_name, owner, run_id, detail, since);
