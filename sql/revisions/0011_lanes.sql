-- Revision 0011_lanes: lanes, the workloads a runner process serves (runner/lanes.py).
--
-- A run belongs to one lane (job_runs.lane, since 0001 a free tag that nothing read): a
-- live slot to its job's lane (realtime unless the job says otherwise), a rerun to
-- correction, an approved run to manual, a backfill plan's runs to the plan's lane (bulk
-- unless the operator says otherwise), the runs a misfire replays to correction. A process
-- claims only the runs of the lanes it serves (runner start --lanes), with per-process
-- handler slots for each lane, and every claim of a queued run (retries, reruns, catch-up,
-- approvals, backfills) respects the lane's fleet budget: at most `concurrency` of its runs
-- running at once across all processes, at most `rate` starts per second (a token bucket on
-- the lane's row), both taken under the lane row's lock (runner.lane_budget_v1).
--
-- Expand only, except the tag values: existing runs and plans get the names of the lanes
-- they meant ('default' was the live path, 'backfill' the old plan default), so the old
-- default tag "backfill" is migrated to bulk rather than kept as an alias.

CREATE TABLE runner.lanes (
    lane                text PRIMARY KEY,
    rank                integer NOT NULL,
    concurrency         integer,
    rate                double precision,
    tokens              double precision NOT NULL DEFAULT 0,
    tokens_at           timestamptz NOT NULL DEFAULT now(),
    builtin             boolean NOT NULL DEFAULT false,
    description         text,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT lanes_name CHECK (lane ~ '^[a-z][a-z0-9_]{0,39}$'),
    CONSTRAINT lanes_rank CHECK (rank BETWEEN 0 AND 1000),
    CONSTRAINT lanes_concurrency CHECK (concurrency IS NULL OR concurrency >= 0),
    CONSTRAINT lanes_rate CHECK (rate IS NULL OR (rate > 0 AND rate < 'infinity'::float8))
);
COMMENT ON TABLE runner.lanes IS
    'the lanes runs belong to: priority rank (lower first), fleet concurrency and rate of their queued runs';
COMMENT ON COLUMN runner.lanes.concurrency IS
    'at most this many queued runs of the lane (retries, reruns, catch-up, backfills) running at once, fleet-wide; NULL: no limit';
COMMENT ON COLUMN runner.lanes.rate IS
    'at most this many starts of queued runs per second, fleet-wide (a token bucket holding max(1, rate)); NULL: no limit';

INSERT INTO runner.lanes (lane, rank, builtin, description) VALUES
    ('realtime', 0, true, 'live slots'),
    ('correction', 10, true, 'recent misses, small reprocessing, reruns'),
    ('manual', 20, true, 'approved high-risk work'),
    ('bulk', 30, true, 'large historical backfills');

-- the old tags: 'default' (every run until now), 'backfill' (the old plan default)
UPDATE runner.job_runs SET lane = CASE
        WHEN lane = 'backfill' THEN 'bulk'
        WHEN lane = 'catch_up' THEN 'correction'
        WHEN trigger = 'catch_up' THEN 'correction'
        WHEN trigger = 'manual' AND status IN ('pending', 'awaiting_approval') THEN 'correction'
        ELSE 'realtime' END
WHERE lane IN ('default', 'backfill', 'catch_up');
UPDATE runner.backfills SET lane = 'bulk' WHERE lane = 'backfill';
ALTER TABLE runner.job_runs ALTER COLUMN lane SET DEFAULT 'realtime';
ALTER TABLE runner.backfills ALTER COLUMN lane SET DEFAULT 'bulk';

-- a lane's running runs, counted at every claim of one of its queued runs
CREATE INDEX job_runs_lane_running ON runner.job_runs (lane) WHERE status = 'running';
-- a lane's queued runs, oldest due first (claim_due_runs walks them lane by lane)
CREATE INDEX job_runs_lane_due ON runner.job_runs (lane, next_attempt_at)
    WHERE status IN ('pending', 'failed');
