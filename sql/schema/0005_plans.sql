-- 0005_plans (issue 26): the gap scan lists the runs coalesced into a covering run that is dead
-- or awaiting approval (sql/views/missing_slots.sql); it finds them from the cover by this
-- index. On a large ledger, build it by hand first, CONCURRENTLY (README, "Upgrading while
-- running"): this step then has nothing to do.
CREATE INDEX IF NOT EXISTS job_runs_coalesced_into
    ON runner.job_runs (job_name, coalesced_into_slot, partition_key)
    WHERE status = 'coalesced';
