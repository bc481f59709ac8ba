-- runner.run_covered_v1: the one SQL definition of *covered* (issue 26): whether a run
-- accounts for its slot x partition, so that nothing more is owed for it.
--
-- A run covers its slot when it
--   * succeeded;
--   * was skipped (by a misfire policy, a tier, or an operator's audited request) or
--     cancelled (an operator's audited decision): the decision is the cover, its reason is in
--     status_reason (the audit's skipped_without_reason flags one without);
--   * was coalesced into another run of the same job and partition (coalesced_into_slot) that
--     itself succeeded. While that cover is pending, running, failed, dead or awaiting
--     approval, or when it is missing, the coalesced slot is not covered: the gap scan lists it
--     (with the cover's state) and retention keeps it.
-- Any other status (pending, running, failed, dead, awaiting_approval) covers nothing.
--
-- runner.run_settled_v1(status) is the status half alone: a run in one of these statuses
-- needs no more work of its own (succeeded, skipped, coalesced, cancelled). The partial index
-- job_runs_unaccounted (sql/schema/0001_baseline.sql) holds exactly the other statuses;
-- tests/test_expected.py checks that the two and the status constraint agree.
--
-- Users: retention (runner.prune_v1 deletes only covered runs), the ledger audit
-- (runner.check_v1), the late alert (runner.alert_late) and backfill planning
-- (runner.plan_range_v1). The gap scan (runner.missing_slots_v1) reads the same rule from the
-- partial index and from the covers' side (see its header).
CREATE OR REPLACE FUNCTION runner.run_settled_v1(status text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT run_settled_v1.status IN ('succeeded', 'skipped', 'coalesced', 'cancelled')
$$;

CREATE OR REPLACE FUNCTION runner.run_covered_v1(
    job text, partition text, status text, cover_slot timestamptz)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT CASE
    WHEN run_covered_v1.status IN ('succeeded', 'skipped', 'cancelled') THEN true
    WHEN run_covered_v1.status = 'coalesced' THEN EXISTS (
        SELECT 1 FROM runner.job_runs t
        WHERE t.job_name = run_covered_v1.job
          AND t.schedule_slot = run_covered_v1.cover_slot
          AND t.partition_key = run_covered_v1.partition
          AND t.status = 'succeeded')
    ELSE false
END
$$;
