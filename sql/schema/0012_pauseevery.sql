-- 0012_pauseevery: `runner backfill --pause-every SECONDS`. A plan's pause condition
-- (pause_when) is evaluated at most once every pause_every seconds across all runners (the
-- due check and its re-check under the plan's condition lock: sql/queries/conditions.sql);
-- 5, the fixed interval before this step, for the plans written before it and by the
-- clients that do not name it (runner.create_backfill_v1 and _v2, a misfire tier's plan).
-- Expand only: a new column with a default, which no older runner names.
ALTER TABLE runner.backfills ADD COLUMN IF NOT EXISTS pause_every integer NOT NULL DEFAULT 5
    CONSTRAINT backfills_pause_every_check CHECK (pause_every BETWEEN 1 AND 3600);
