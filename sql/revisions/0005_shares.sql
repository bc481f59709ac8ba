-- Revision 0005_shares: which jobs each runner process serves.
--
-- A slot's rows are shared out among the live runners that serve its job (runner/loop.py:
-- each claims its own share at once and the others' shares only if still unclaimed a moment
-- later), so that runners claiming the same slot do not wait on each other's inserts.
-- NULL (a runner of an earlier version) serves no share: such a runner claims everything
-- at once, as before.

ALTER TABLE runner.instances ADD COLUMN jobs text[];
COMMENT ON COLUMN runner.instances.jobs IS
    'the jobs this runner process serves (its share of their slots is claimed by it first)';

-- The hung-owner check reads the running attempts through attempts_running (their number is
-- the runs in flight); an index on heartbeat_at only made every heartbeat and every attempt
-- insert write one more index entry (and kept heartbeats from being HOT updates).
DROP INDEX runner.attempts_running_heartbeat;
