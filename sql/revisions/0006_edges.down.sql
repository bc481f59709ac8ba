-- Revision 0006_edges, downgrade. The gap scan and the watermark advance of revision 0003
-- come back from sql/revisions/0003_time.gapscan.sql (see migrations/versions/0006_edges.py).

DROP FUNCTION IF EXISTS runner.start_attempts_v1(bigint[], bigint[], boolean, text, integer, uuid, integer, timestamptz);
DROP TRIGGER IF EXISTS jobs_record_pause ON runner.jobs;
DROP FUNCTION IF EXISTS runner.record_pause_v1();
DROP TABLE IF EXISTS runner.job_pauses;
DROP TABLE IF EXISTS runner.slot_fanouts;
