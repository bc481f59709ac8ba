-- Revision 0015_scale, downgrade: the server's autovacuum settings again for the hot tables.
ALTER TABLE runner.job_runs RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor, autovacuum_analyze_threshold
);
ALTER TABLE runner.attempts RESET (
    autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold,
    autovacuum_analyze_scale_factor, autovacuum_analyze_threshold
);
DROP INDEX IF EXISTS runner.attempts_failed_finished;
