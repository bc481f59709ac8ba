-- Revision 0013_verify, downgrade.
DROP VIEW IF EXISTS runner.backfill_plans;
DROP FUNCTION IF EXISTS runner.verify_query_v1(text, timestamptz, timestamptz, text, text[], integer);
DROP TRIGGER IF EXISTS backfills_count_pauses ON runner.backfills;
DROP FUNCTION IF EXISTS runner.count_backfill_pauses_v1();
ALTER TABLE runner.backfills DROP COLUMN IF EXISTS pause_cause, DROP COLUMN IF EXISTS pauses;
