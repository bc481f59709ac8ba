-- Revision 0014_webperf: indexes that match what the console's pages and `runner status` ask,
-- and runner.missing_slots_v1 reaching one job by its key (applied after this file, from
-- 0014_webperf.missing_slots.sql: the same rows, its jobs read by key when only_job is given,
-- where it read every job and every watermark on each call; runner.job_health calls it once
-- per job). No view's text changes, so no view's meaning does.
-- Each statement they issue reads what is live (unfinished runs, open problems, a time window,
-- a bounded number of runs per job) through an index, never a job's whole history:
--
--   job_runs_unfinished   runner.job_health's oldest_unfinished_slot (min slot of a job's
--                         pending, running or failed runs: one probe, where the index of
--                         unaccounted runs also holds every dead run the job ever kept) and
--                         failed_24h (the job's failed runs, not every job's retry queue)
--   job_runs_succeeded    now covering started_at: runner.alerts' slow branch reads the last
--                         100 successful durations of each job and its last 24 hours of
--                         successes from the index alone (no heap fetch per run)
--   effects_resent        runner.alerts' effect_duplicate (send_count > 1) without reading
--                         every effect ever recorded
--   instances_live        the live runner sessions (alerts' job_not_in_code gate and
--                         lock_squatter, the shares), not every instance that ever started
--
-- CREATE INDEX (not CONCURRENTLY: a migration runs in one transaction) blocks writes to the
-- table while it builds: about 20-40 s for job_runs at 10 million runs on two cores. Runners
-- wait (their statements queue on the lock), none fails. Expand-only: the old code is not
-- affected by the new indexes; job_runs_succeeded keeps its name and key.
CREATE INDEX job_runs_unfinished ON runner.job_runs (job_name, schedule_slot)
    WHERE status IN ('pending', 'running', 'failed');

CREATE INDEX job_runs_succeeded_covering ON runner.job_runs (job_name, finished_at DESC)
    INCLUDE (started_at) WHERE status = 'succeeded';
DROP INDEX runner.job_runs_succeeded;
ALTER INDEX runner.job_runs_succeeded_covering RENAME TO job_runs_succeeded;

CREATE INDEX effects_resent ON runner.effects (updated_at) WHERE send_count > 1;

CREATE INDEX instances_live ON runner.instances (heartbeat_at) WHERE stopped_at IS NULL;
