-- Revision 0013_verify: verification kinds and backfill metrics.
--
-- * runner.verify_query_v1 (sql/functions/verify_query_v1.sql, applied just after this
--   file): a job's verification SQL runs through it, as the condition role.
-- * runner.backfills.pauses counts a plan's pauses by cause, and pause_cause is the cause
--   of the pause it is in (NULL when it is not paused); a trigger keeps both, whichever path
--   paused the plan (its lane, its pause condition, an operator), so the metrics endpoint
--   (runner/metrics.py) reads pauses by cause from the ledger.
-- * runner.backfill_plans: the plans with their progress, pauses and verification by kind
--   (sql/views/backfill_plans.sql, applied after the function).

ALTER TABLE runner.backfills
    ADD COLUMN pauses jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN pause_cause text CHECK (pause_cause IN ('max_failures', 'condition', 'condition_error',
                                                       'operator', 'other'));

-- The cause of a pause, by the reason its writer gave (the lane: "... max_failures=N ...";
-- runner/conditions.py: "pause_when returned true" / "pause_when failed: ..."; an operator's
-- action: "paused by WHO: ..."). A pause entered counts once; a resume clears the cause.
CREATE FUNCTION runner.count_backfill_pauses_v1() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cause text;
BEGIN
    IF NEW.status = 'paused' AND OLD.status IS DISTINCT FROM 'paused' THEN
        cause := CASE
            WHEN NEW.pause_reason LIKE 'paused by %' THEN 'operator'
            WHEN NEW.pause_reason LIKE 'pause_when failed%' THEN 'condition_error'
            WHEN NEW.pause_reason LIKE 'pause_when returned true%' THEN 'condition'
            WHEN NEW.pause_reason LIKE '%max\_failures=%' THEN 'max_failures'
            ELSE 'other'
        END;
        NEW.pause_cause := cause;
        NEW.pauses := jsonb_set(coalesce(OLD.pauses, '{}'::jsonb), ARRAY[cause],
                                to_jsonb(coalesce((OLD.pauses ->> cause)::bigint, 0) + 1));
    ELSIF NEW.status <> 'paused' THEN
        NEW.pause_cause := NULL;
    END IF;
    RETURN NEW;
END
$$;

CREATE TRIGGER backfills_count_pauses
    BEFORE UPDATE OF status ON runner.backfills
    FOR EACH ROW WHEN (NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION runner.count_backfill_pauses_v1();
