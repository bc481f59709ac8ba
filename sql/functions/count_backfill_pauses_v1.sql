-- runner.count_backfill_pauses_v1(): a trigger on runner.backfills. The cause of a pause, by
-- the reason its writer gave (the lane: "... max_failures=N ..."; runner/conditions.py:
-- "pause_when returned true" / "pause_when failed: ..."; an operator's action: "paused by
-- WHO: ..."). A pause entered counts once in `pauses` (by cause); a resume clears the cause.
-- runner/metrics.py and runner.backfill_plans read them.

CREATE OR REPLACE FUNCTION runner.count_backfill_pauses_v1() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'pg_temp'
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

CREATE OR REPLACE TRIGGER backfills_count_pauses BEFORE UPDATE OF status ON runner.backfills FOR EACH ROW WHEN ((new.status IS DISTINCT FROM old.status)) EXECUTE FUNCTION runner.count_backfill_pauses_v1();
