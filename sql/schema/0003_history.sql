-- 0003_history (issue 26, defects 2 and 5): the schedule history knows which
-- definition each row is and who wrote it; each runner records the definition it runs of each
-- job; confirmed effect keys outlive their runs.
--
-- Expand only: nullable columns that runners of 0025 never name (their INSERT of
-- runner.job_schedules runs the trigger too, so their rows are stamped as well), one table,
-- and the trigger that stamps each row (a live object: sql/functions/job_schedules_stamp_v1.sql).
-- runner/history.py says how the history is kept (sync, conflict, re-assertion).

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

-- rows written before this revision: trusted as they are (nothing recorded who wrote them)
UPDATE runner.job_schedules s
-- (the formula of runner.schedule_fingerprint_v1 as of this step, written out: live objects
-- are applied after the schema steps)
SET fingerprint = left(pg_catalog.md5(pg_catalog.concat_ws('|', s.schedule_kind, coalesce(s.cron, ''),
                                                 coalesce(extract(epoch FROM s.every_interval)::text, ''),
                                                 s.timezone,
                                                 coalesce(pg_catalog.array_to_json(s.partitions)::text, 'null'),
                                                 coalesce(s.dynamic_partitions, false)::text)), 12),
    recorded_at = s.valid_from,
    explained_by = 'before revision 0003_history'
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
