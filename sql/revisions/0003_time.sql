-- Revision 0003_time: Time: misfire decisions, the gap-scan view, backfills, approvals.

-- == misfire decisions ========================================================================
-- A late slot under misfire="coalesce" is recorded as 'coalesced', pointing (by business
-- key: same job and partition) to the slot of the run that covers it.
ALTER TABLE runner.job_runs ADD COLUMN coalesced_into_slot timestamptz;

-- == gap scan: watermarks and recorded holes ==================================================
-- runner.missing_slots (sql/views/missing_slots.sql) expands each job's expected slots from
-- its schedule history. So that its cost does not grow with the ledger's age, slots are only
-- expanded above a per-job watermark; below it the view reads the holes the watermark advance
-- recorded (runner.gap_holes), and runs that are not accounted for come from a partial index
-- (job_runs_unaccounted). runner.advance_watermarks_v1() moves the watermarks and the holes.
--
-- Invariant: for every job with a watermark row whose track_from equals runner.jobs.track_from,
-- every expected slot x partition s with track_from <= s <= complete_through, judged by the
-- schedule rows with valid_from <= schedule_from, had a run row (any status) or a hole row
-- when the advance that set complete_through ran. Run rows are never taken back except by
-- pruning, so the invariant only weakens through a schedule row newer than schedule_from
-- (the view then trusts the watermark only below that row's valid_from) or a changed
-- track_from (the view then ignores the watermark).
CREATE TABLE runner.gap_watermarks (
    job_name            text PRIMARY KEY REFERENCES runner.jobs (job_name) ON DELETE CASCADE,
    complete_through    timestamptz,          -- NULL: nothing known yet
    schedule_from       timestamptz,          -- newest job_schedules.valid_from the advance saw
    track_from          timestamptz,          -- runner.jobs.track_from the advance saw
    advanced_at         timestamptz
);

-- Expected slots that had no run at all when the watermark passed them. A static partition
-- (or the '' of an unpartitioned job) is one hole; a slot of a job with dynamic partitions
-- that was never fanned out is one whole_slot hole (partition_key ''). A hole that later gets
-- a run is ignored by the view and deleted by the next advance.
CREATE TABLE runner.gap_holes (
    job_name            text NOT NULL REFERENCES runner.jobs (job_name) ON DELETE CASCADE,
    schedule_slot       timestamptz NOT NULL,
    whole_slot          boolean NOT NULL,
    partition_key       text NOT NULL,
    recorded_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_name, schedule_slot, whole_slot, partition_key),
    CONSTRAINT gap_holes_whole_slot CHECK (NOT whole_slot OR partition_key = '')
);

-- Runs that do not account for their slot (every status but succeeded, skipped, coalesced and
-- cancelled): the gap scan lists them over the whole tracked range without scanning old runs.
CREATE INDEX job_runs_unaccounted ON runner.job_runs (job_name, schedule_slot)
    WHERE status IN ('pending', 'running', 'failed', 'dead', 'awaiting_approval');

-- == backfills ===================================================================================
-- A backfill plan: throttled re-execution of a job's slots in [range_from, range_to) (times
-- partitions). Creating it queues one run per slot x partition in the same transaction: a
-- missing run is inserted 'pending', an existing run that is not succeeded (or is, with
-- force) is queued again as a new attempt of the same run; either way with trigger 'backfill',
-- the plan's replay_group_id and lane. runner/backfill.py is the lane that executes them:
-- runs of a plan that is planned, running or paused are claimed only there (never by the
-- loop's claim_due_runs), at most `concurrency` running at once across all processes and at
-- most `rate` starts per second (a token bucket: `tokens` as of `tokens_at`, holding at most
-- max(1, rate) tokens). A plan pauses itself past `max_failures` failed + dead runs, or when
-- the operator's `pause_when` query (run read-only, with a statement timeout) returns true
-- or fails; it completes when none of its runs is pending, running or failed, and then the
-- job's verify check runs over the range (verify_status/verify_detail/verified_at).
--
-- Processes serialise their passes over one plan with a transaction-level advisory lock in
-- the two-int form: (lock namespace, plan id). Run locks use the one-bigint form, and
-- PostgreSQL keeps the two forms apart, so plan and run keys cannot collide; ids stay below
-- 2^31 to fit the int key.
CREATE TABLE runner.backfills (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY
                        CHECK (id < 2147483648),
    replay_group_id     uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    job_name            text NOT NULL,
    range_from          timestamptz NOT NULL,
    range_to            timestamptz NOT NULL,
    partitions          text[],               -- NULL: the job's own partitions (or none)
    lane                text NOT NULL DEFAULT 'backfill' CHECK (btrim(lane) <> ''),
    concurrency         integer NOT NULL DEFAULT 1 CHECK (concurrency >= 1),
    rate                double precision CHECK (rate > 0),   -- runs started per second; NULL: unlimited
    max_failures        integer CHECK (max_failures >= 0),   -- NULL: never pause on failures
    pause_when          text CHECK (btrim(pause_when) <> ''),
    pause_checked_at    timestamptz,          -- when pause_when last ran (at most every 5 s)
    force               boolean NOT NULL DEFAULT false,
    status              text NOT NULL DEFAULT 'running' CHECK (status IN (
                            'planned', 'running', 'paused', 'cancelled', 'completed')),
    pause_reason        text,
    expected_runs       integer NOT NULL DEFAULT 0 CHECK (expected_runs >= 0),
    tokens              double precision NOT NULL DEFAULT 1,
    tokens_at           timestamptz NOT NULL DEFAULT now(),
    requested_by        text NOT NULL CHECK (btrim(requested_by) <> ''),
    reason              text NOT NULL CHECK (btrim(reason) <> ''),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    paused_at           timestamptz,
    finished_at         timestamptz,
    verify_status       text CHECK (verify_status IN ('passed', 'failed', 'error', 'not_configured')),
    verify_detail       jsonb,
    verified_at         timestamptz,
    CONSTRAINT backfills_range CHECK (range_from < range_to)
);

-- the plans a lane pass looks at (every tick of every runner), and a run's plan
CREATE INDEX backfills_active ON runner.backfills (status, job_name)
    WHERE status IN ('planned', 'running', 'paused');
-- a plan's runs by status: progress, running (its concurrency), failed + dead, completion
CREATE INDEX job_runs_replay_group ON runner.job_runs (replay_group_id, status)
    WHERE replay_group_id IS NOT NULL;
-- its lane's queue, oldest slot first. Queued backfill runs have next_attempt_at NULL (the
-- lane, not a due time, decides when they start), so claim_due_runs never walks them.
CREATE INDEX job_runs_replay_queue ON runner.job_runs (replay_group_id, schedule_slot)
    WHERE replay_group_id IS NOT NULL AND status IN ('pending', 'failed');
