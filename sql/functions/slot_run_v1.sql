-- runner.slot_run_v1: the one probe for "has this slot x partition a run" (any status), used
-- by the gap scan (runner.missing_slots_v1, above and below the watermark) and by the
-- watermark advance (runner.advance_watermarks_v3: the slots it expands, the holes it tidies).
--
-- partition: a partition key, or NULL for "any partition" (a slot of a dynamic job whose
-- fan-out was never recorded expects at least one run). At most one row, true, when there is
-- such a run; none when there is not.
--
-- Two branches, one taken per call, each a seek that no index reads past: a partition's probe
-- seeks job_runs' whole key (job, slot, partition), an index-only scan; the NULL probe seeks
-- (job, slot) and stops at its first run. The single form `partition IS NULL OR
-- r.partition_key = partition` sought (job, slot) and read the slot's runs until it met the
-- partition: half the slot's partitions per probe (80 s for the 100,000 probes of one slot of
-- 100 jobs x 1,000 partitions in the advance, issue 32).
--
-- Inlined where it is called (LANGUAGE sql, one SELECT, STABLE, not STRICT, no SET clause,
-- returning a set: PostgreSQL's rules for inlining a function in FROM), so each caller's plan
-- holds the two index probes themselves, the NULL test of the branch not taken a one-time
-- filter (tests/test_gap_scan.py reads that plan). Call it in FROM: LATERAL ... ON true with
-- `IS NULL` on its column, or NOT EXISTS (SELECT 1 FROM runner.slot_run_v1(...)).
CREATE OR REPLACE FUNCTION runner.slot_run_v1(job text, slot timestamptz, partition text)
RETURNS SETOF boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT true FROM runner.job_runs r
WHERE slot_run_v1.partition IS NOT NULL AND r.job_name = slot_run_v1.job
  AND r.schedule_slot = slot_run_v1.slot AND r.partition_key = slot_run_v1.partition
UNION ALL
SELECT true FROM runner.job_runs r
WHERE slot_run_v1.partition IS NULL AND r.job_name = slot_run_v1.job
  AND r.schedule_slot = slot_run_v1.slot
LIMIT 1
$$;
