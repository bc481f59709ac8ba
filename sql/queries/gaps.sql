-- Named statements of `runner gaps` (runner/cli.py): the gap scan, runner.missing_slots.

-- name: advance_watermarks
-- Move the gap-scan watermarks first, so that the scan expands only recent slots: one call,
-- about 200,000 slot expansions at most (a ledger whose watermarks are far behind is caught
-- up by the runners' duty, in short transactions; the scan is correct wherever they stand).
SELECT a.moved AS advanced FROM runner.advance_watermarks_v3(NULL, NULL, 200000) AS a

-- name: advance_watermarks_bounded
-- One bounded call of the duty (runner/gapscan.py): about max_probes slot expansions in all;
-- tidy: also forget holes under the watermark that got a run (its last call only).
SELECT a.moved, a.behind
FROM runner.advance_watermarks_v3(NULL, NULL, %(max_probes)s::integer, %(tidy)s::boolean) AS a

-- name: list_gaps
-- The gap scan at the ledger's now (runner.ledger_now_v1(): a replica's last replayed commit), narrowed to one job and to slots at or after `since`
-- inside the scan (cheaper than filtering the view).
SELECT m.job_name, m.schedule_slot, m.local_slot, m.partition_key, m.state, m.run_id,
       m.attempt, m.next_attempt_at, m.heartbeat_at, m.last_error, m.status_reason,
       m.lateness, m.paused
FROM runner.missing_slots_v1(runner.ledger_now_v1(), %(job_name)s::text, %(since)s::timestamptz) m
ORDER BY m.schedule_slot, m.job_name, m.partition_key NULLS FIRST
LIMIT %(limit)s
