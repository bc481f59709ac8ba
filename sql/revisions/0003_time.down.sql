-- Undo revision 0003_time.

-- == misfire decisions ==
ALTER TABLE runner.job_runs DROP COLUMN IF EXISTS coalesced_into_slot;
