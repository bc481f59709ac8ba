-- Revision 0001: the ledger's foundation.
--
-- A job's schedule turns into slots; each slot x partition is one row of runner.job_runs
-- (the unique constraint below is the "at most one run" guarantee); each physical try of a
-- run is one row of runner.attempts. runner.jobs holds the definitions as last synced from
-- code, runner.job_schedules the history of their schedules (the gap scan judges old slots
-- by the schedule then in force), runner.instances the live runner processes.

CREATE TABLE runner.jobs (
    job_name            text PRIMARY KEY CHECK (job_name <> ''),
    schedule_kind       text NOT NULL CHECK (schedule_kind IN ('cron', 'every')),
    cron                text,
    every_interval      interval,
    timezone            text NOT NULL DEFAULT 'UTC',
    partitions          text[],
    dynamic_partitions  boolean NOT NULL DEFAULT false,
    max_attempts        integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    version             text NOT NULL DEFAULT '',
    options             jsonb NOT NULL DEFAULT '{}'::jsonb,
    paused              boolean NOT NULL DEFAULT false,
    track_from          timestamptz NOT NULL,
    first_registered_at timestamptz NOT NULL DEFAULT now(),
    synced_at           timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT jobs_schedule_shape CHECK (
        (schedule_kind = 'cron' AND cron IS NOT NULL AND every_interval IS NULL)
        OR (schedule_kind = 'every' AND every_interval > interval '0' AND cron IS NULL)
    )
);

CREATE TABLE runner.job_schedules (
    job_name            text NOT NULL REFERENCES runner.jobs (job_name) ON DELETE CASCADE,
    valid_from          timestamptz NOT NULL,
    schedule_kind       text NOT NULL CHECK (schedule_kind IN ('cron', 'every')),
    cron                text,
    every_interval      interval,
    timezone            text NOT NULL,
    partitions          text[],
    dynamic_partitions  boolean NOT NULL DEFAULT false,
    PRIMARY KEY (job_name, valid_from)
);

CREATE TABLE runner.job_runs (
    -- ids stay below 2^48 so that runner.lock_key_v1 maps live runs to distinct advisory keys
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY
                        CHECK (id < 281474976710656),
    job_name            text NOT NULL,
    schedule_slot       timestamptz NOT NULL,
    partition_key       text NOT NULL DEFAULT '',
    business_date       date NOT NULL,
    window_start        timestamptz NOT NULL,
    window_end          timestamptz NOT NULL,
    status              text NOT NULL CHECK (status IN (
                            'pending', 'running', 'succeeded', 'failed', 'dead', 'skipped',
                            'coalesced', 'awaiting_approval', 'cancelled')),
    trigger             text NOT NULL CHECK (trigger IN (
                            'schedule', 'catch_up', 'retry', 'recovery', 'manual', 'backfill')),
    attempt             integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    fence               bigint NOT NULL DEFAULT 0 CHECK (fence >= 0),
    idempotency_key     text NOT NULL,
    replay_group_id     uuid,
    lane                text NOT NULL DEFAULT 'default',
    scheduled_at        timestamptz NOT NULL DEFAULT now(),
    next_attempt_at     timestamptz,
    started_at          timestamptz,
    finished_at         timestamptz,
    processed_count     bigint NOT NULL DEFAULT 0,
    failed_count        bigint NOT NULL DEFAULT 0,
    last_error          text,
    status_reason       text,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT job_runs_business_key UNIQUE (job_name, schedule_slot, partition_key),
    CONSTRAINT job_runs_window CHECK (window_start <= window_end)
);

-- due work that is not a fresh slot: retries and queued runs
CREATE INDEX job_runs_due ON runner.job_runs (next_attempt_at)
    WHERE status IN ('pending', 'failed');
-- runs with a live (or lost) owner
CREATE INDEX job_runs_running ON runner.job_runs (job_name) WHERE status = 'running';
-- (a job's runs by slot are served by the business key's index: job_name, schedule_slot, ...)

CREATE TABLE runner.instances (
    instance_id         uuid PRIMARY KEY,
    host                text NOT NULL,
    pid                 integer NOT NULL,
    backend_pid         integer,
    lock_namespace      integer NOT NULL,
    started_at          timestamptz NOT NULL DEFAULT now(),
    heartbeat_at        timestamptz NOT NULL DEFAULT now(),
    stopped_at          timestamptz,
    runner_version      text NOT NULL DEFAULT ''
);

CREATE TABLE runner.attempts (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id              bigint NOT NULL REFERENCES runner.job_runs (id) ON DELETE CASCADE,
    attempt             integer NOT NULL CHECK (attempt >= 1),
    fence               bigint NOT NULL CHECK (fence >= 1),
    trigger             text NOT NULL,
    owner_host          text NOT NULL,
    owner_pid           integer NOT NULL,
    owner_instance      uuid NOT NULL,
    lock_key            bigint NOT NULL,
    started_at          timestamptz NOT NULL DEFAULT now(),
    heartbeat_at        timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz,
    status              text NOT NULL DEFAULT 'running' CHECK (status IN (
                            'running', 'succeeded', 'failed', 'dead', 'timed_out',
                            'abandoned', 'released', 'stale')),
    error_class         text,
    error_message       text,
    CONSTRAINT attempts_run_fence UNIQUE (run_id, fence)
);

CREATE INDEX attempts_running ON runner.attempts (owner_instance) WHERE status = 'running';
