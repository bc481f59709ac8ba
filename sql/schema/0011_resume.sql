-- 0011_resume (issue 33): `runner backfill --resume`. A plan's re-queued runs (failed, dead,
-- skipped, ..., and succeeded ones with --force) start from scratch: their checkpoint state is
-- cleared when the plan is created (runner.create_backfill_v2), unless the operator asked
-- them to resume, when it is kept and each run's next attempt continues from it (ctx.resume).
-- The plan remembers which (backfill show, the console's backfill page); runs the plan
-- inserts have no checkpoint either way. A plan written by an older runner
-- (runner.create_backfill_v1) did not resume: false.
ALTER TABLE runner.backfills ADD COLUMN IF NOT EXISTS resume boolean NOT NULL DEFAULT false;
