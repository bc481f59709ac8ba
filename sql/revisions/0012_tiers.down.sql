-- Revision 0012_tiers, downgrade. runner.alerts comes back from the frozen copy of revision
-- 0009_retention (see migrations/versions/0012_tiers.py). The tiers stored in runner.jobs.options
-- stay (an older runner ignores them).
DROP VIEW IF EXISTS runner.alerts;
DROP FUNCTION IF EXISTS runner.tier_backfill_v1(
    text, text, interval, timestamptz[], text[], date[], timestamptz[], timestamptz[], text[], text,
    timestamptz);
DROP TABLE IF EXISTS runner.misfire_decisions;
