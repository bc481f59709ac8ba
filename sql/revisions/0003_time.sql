-- Revision 0003_time: Time: misfire decisions, the gap-scan view, backfills, approvals.

-- == misfire decisions ========================================================================
-- A late slot under misfire="coalesce" is recorded as 'coalesced', pointing (by business
-- key: same job and partition) to the slot of the run that covers it.
ALTER TABLE runner.job_runs ADD COLUMN coalesced_into_slot timestamptz;
