-- 0010_runs (issue 30, point 5): the console's Runs page lists runs newest slot first, keyset
-- paged on (schedule_slot, id), across every job or narrowed by filters. With a job, the runs'
-- business key (job_name, schedule_slot, partition_key) serves the order; across jobs these two
-- do: every run in slot order, and the runs needing attention (pending, running, failed, dead,
-- awaiting approval: a small share of a large ledger) in slot order, so a page of dead runs of
-- every job reads that small index, not the whole ledger. On a large ledger, build them by hand
-- first, CONCURRENTLY (README, "Upgrading while running"): this step then has nothing to do.
CREATE INDEX IF NOT EXISTS job_runs_slot_order
    ON runner.job_runs (schedule_slot, id);
CREATE INDEX IF NOT EXISTS job_runs_attention_order
    ON runner.job_runs (schedule_slot, id)
    WHERE status IN ('pending', 'running', 'failed', 'dead', 'awaiting_approval');
