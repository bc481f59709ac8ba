-- Revision 0026_history (issue 26, defects 2 and 5): the schedule history knows which
-- definition each row is and who wrote it; each runner records the definition it runs of each
-- job; confirmed effect keys outlive their runs.
--
-- Expand only: nullable columns that runners of 0025 never name (their INSERT of
-- runner.job_schedules runs the trigger too, so their rows are stamped as well), one table,
-- one trigger. runner/history.py says how the history is kept (sync, conflict, re-assertion).

-- == the schedule history: each row stamped at insert ==========================================
ALTER TABLE runner.job_schedules ADD COLUMN IF NOT EXISTS fingerprint text;
ALTER TABLE runner.job_schedules ADD COLUMN IF NOT EXISTS recorded_at timestamptz;
ALTER TABLE runner.job_schedules ADD COLUMN IF NOT EXISTS explained_by text;
COMMENT ON COLUMN runner.job_schedules.fingerprint IS
    'runner.schedule_fingerprint_v1 of the row''s definition, set by the trigger job_schedules_stamp (never the writer''s choice)';
COMMENT ON COLUMN runner.job_schedules.recorded_at IS
    'when the row was written (the writing transaction''s now()), set by the trigger job_schedules_stamp';
COMMENT ON COLUMN runner.job_schedules.explained_by IS
    'why the row is in the history: a sync or re-assertion of runner.sync_schedule_v1, a runner''s plain append in force from now, the schema owner; NULL: nothing explains it (runner check: history_unexplained)';

-- runner.job_schedules_stamp_v1(): every history row is stamped when it is written, whoever
-- writes it: its fingerprint and the instant it was recorded, and what explains it.
--   * the schema owner (its SECURITY DEFINER functions, runner.sync_schedule_v1 among them,
--     the migrations, a DBA): the explanation it gives, 'schema owner' when it gives none;
--   * anyone else (a runner of revision 0025 or earlier appends with a plain INSERT, its
--     record_schedule statement): 'append' when the row is in force from now on (valid_from
--     at or after the transaction's now()) and is the job's definition in runner.jobs, or is
--     the job's first row at its track_from; otherwise NULL. So a row back-dated into the
--     past (issue 28, point 1: a worker login dating "every 100 years" a second after
--     track_from hid 48 missed slots) or one that is not the job's synced definition is left
--     unexplained, and runner.check_v1 reports it as history_unexplained.
CREATE OR REPLACE FUNCTION runner.job_schedules_stamp_v1()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
    owner_oid oid := (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'runner');
BEGIN
    NEW.fingerprint := runner.schedule_fingerprint_v1(NEW.schedule_kind, NEW.cron, NEW.every_interval,
                                                      NEW.timezone, NEW.partitions, NEW.dynamic_partitions);
    NEW.recorded_at := now();
    IF pg_catalog.pg_has_role(current_user, owner_oid, 'MEMBER') THEN
        NEW.explained_by := coalesce(NEW.explained_by, 'schema owner');
    ELSIF EXISTS (SELECT 1 FROM runner.jobs j
                  WHERE j.job_name = NEW.job_name AND j.retired_at IS NULL
                    AND ((NEW.valid_from >= now()
                          AND (j.schedule_kind, j.cron, j.every_interval, j.timezone, j.partitions,
                               j.dynamic_partitions)
                              IS NOT DISTINCT FROM
                              (NEW.schedule_kind, NEW.cron, NEW.every_interval, NEW.timezone,
                               NEW.partitions, NEW.dynamic_partitions))
                         OR (NEW.valid_from = j.track_from
                             AND NOT EXISTS (SELECT 1 FROM runner.job_schedules s
                                             WHERE s.job_name = NEW.job_name)))) THEN
        NEW.explained_by := 'append';
    ELSE
        NEW.explained_by := NULL;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS job_schedules_stamp ON runner.job_schedules;
CREATE TRIGGER job_schedules_stamp BEFORE INSERT ON runner.job_schedules
    FOR EACH ROW EXECUTE FUNCTION runner.job_schedules_stamp_v1();

-- rows written before this revision: trusted as they are (nothing recorded who wrote them)
UPDATE runner.job_schedules s
SET fingerprint = runner.schedule_fingerprint_v1(s.schedule_kind, s.cron, s.every_interval, s.timezone,
                                                 s.partitions, s.dynamic_partitions),
    recorded_at = s.valid_from,
    explained_by = 'before revision 0026'
WHERE s.fingerprint IS NULL;

-- == the definition each runner runs ==============================================================
-- {job: {"fingerprint": ..., "schedule": "every 3 seconds UTC"}} for each job in its code,
-- written at registration (runner.sync_schedule_v1 returned them); NULL for runners of 0025.
ALTER TABLE runner.instances ADD COLUMN IF NOT EXISTS definitions jsonb;

-- == effect keys that outlive their runs ===========================================================
-- runner.prune_v1 deletes a pruned run's runner.effects rows; the keys that were confirmed
-- stay here, compactly, for ever: the effect log (runner/effects.py) never sends a key found
-- here again, whatever run asks (a backfill --force of a pruned slot, a rerun).
CREATE TABLE IF NOT EXISTS runner.effect_keys (
    effect_key          text PRIMARY KEY CHECK (octet_length(effect_key) BETWEEN 1 AND 2000),
    job_name            text NOT NULL,
    confirmed_at        timestamptz NOT NULL,
    kept_at             timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE runner.effect_keys IS
    'confirmed effect keys of pruned runs (runner.prune_v1): never sent again (runner/effects.py)';
