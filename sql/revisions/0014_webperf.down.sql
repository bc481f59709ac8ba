-- Revision 0014_webperf, downgrade: the indexes as 0010_web had them.
DROP INDEX IF EXISTS runner.instances_live;
DROP INDEX IF EXISTS runner.effects_resent;
DROP INDEX IF EXISTS runner.job_runs_unfinished;
CREATE INDEX job_runs_succeeded_plain ON runner.job_runs (job_name, finished_at DESC)
    WHERE status = 'succeeded';
DROP INDEX runner.job_runs_succeeded;
ALTER INDEX runner.job_runs_succeeded_plain RENAME TO job_runs_succeeded;
