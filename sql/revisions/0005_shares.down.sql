-- Undo revision 0005_shares.

ALTER TABLE runner.instances DROP COLUMN IF EXISTS jobs;
CREATE INDEX IF NOT EXISTS attempts_running_heartbeat ON runner.attempts (heartbeat_at)
    WHERE status = 'running';
