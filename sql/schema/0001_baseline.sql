-- 0001_baseline: the runner schema's tables, indexes, constraints and built-in rows, exactly as
-- the history before it (revisions 0001_foundation .. 0025_scan) left them. A ledger at
-- 0025_scan is stamped onto this revision (runner/migrate.py, STAMPED) and not changed; a fresh
-- database gets it here. Views, functions and triggers are live objects (sql/objects.txt),
-- applied after the schema steps. Never edited: tests/test_migrations.py holds its checksum.

-- table backfills
CREATE TABLE runner.backfills (
    id bigint NOT NULL,
    replay_group_id uuid DEFAULT gen_random_uuid() NOT NULL,
    job_name text NOT NULL,
    range_from timestamp with time zone NOT NULL,
    range_to timestamp with time zone NOT NULL,
    partitions text[],
    lane text DEFAULT 'bulk'::text NOT NULL,
    concurrency integer DEFAULT 1 NOT NULL,
    rate double precision,
    max_failures integer,
    pause_when text,
    pause_checked_at timestamp with time zone,
    force boolean DEFAULT false NOT NULL,
    status text DEFAULT 'running'::text NOT NULL,
    pause_reason text,
    expected_runs integer DEFAULT 0 NOT NULL,
    tokens double precision DEFAULT 1 NOT NULL,
    tokens_at timestamp with time zone DEFAULT now() NOT NULL,
    requested_by text NOT NULL,
    reason text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    paused_at timestamp with time zone,
    finished_at timestamp with time zone,
    verify_status text,
    verify_detail jsonb,
    verified_at timestamp with time zone,
    pauses jsonb DEFAULT '{}'::jsonb NOT NULL,
    pause_cause text,
    CONSTRAINT backfills_concurrency_check CHECK ((concurrency >= 1)),
    CONSTRAINT backfills_expected_runs_check CHECK ((expected_runs >= 0)),
    CONSTRAINT backfills_id_check CHECK ((id < '2147483648'::bigint)),
    CONSTRAINT backfills_lane_check CHECK ((btrim(lane) <> ''::text)),
    CONSTRAINT backfills_max_failures_check CHECK ((max_failures >= 0)),
    CONSTRAINT backfills_pause_cause_check CHECK ((pause_cause = ANY (ARRAY['max_failures'::text, 'condition'::text, 'condition_error'::text, 'operator'::text, 'other'::text]))),
    CONSTRAINT backfills_pause_when_check CHECK ((btrim(pause_when) <> ''::text)),
    CONSTRAINT backfills_range CHECK ((range_from < range_to)),
    CONSTRAINT backfills_rate_check CHECK ((rate > (0)::double precision)),
    CONSTRAINT backfills_reason_check CHECK ((btrim(reason) <> ''::text)),
    CONSTRAINT backfills_requested_by_check CHECK ((btrim(requested_by) <> ''::text)),
    CONSTRAINT backfills_status_check CHECK ((status = ANY (ARRAY['planned'::text, 'running'::text, 'paused'::text, 'cancelled'::text, 'completed'::text]))),
    CONSTRAINT backfills_verify_status_check CHECK ((verify_status = ANY (ARRAY['passed'::text, 'failed'::text, 'error'::text, 'not_configured'::text])))
);

-- table attempts
CREATE TABLE runner.attempts (
    id bigint NOT NULL,
    run_id bigint NOT NULL,
    attempt integer NOT NULL,
    fence bigint NOT NULL,
    trigger text NOT NULL,
    owner_host text NOT NULL,
    owner_pid integer NOT NULL,
    owner_instance uuid NOT NULL,
    lock_key bigint NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    finished_at timestamp with time zone,
    status text DEFAULT 'running'::text NOT NULL,
    error_class text,
    error_message text,
    owner_backend_pid integer,
    CONSTRAINT attempts_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT attempts_fence_check CHECK ((fence >= 1)),
    CONSTRAINT attempts_status_check CHECK ((status = ANY (ARRAY['running'::text, 'succeeded'::text, 'failed'::text, 'dead'::text, 'timed_out'::text, 'abandoned'::text, 'released'::text, 'stale'::text])))
)
WITH (autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='100000', autovacuum_vacuum_insert_scale_factor='0.0', autovacuum_vacuum_insert_threshold='100000', autovacuum_analyze_scale_factor='0.0', autovacuum_analyze_threshold='100000');

-- table effects
CREATE TABLE runner.effects (
    id bigint NOT NULL,
    effect_key text NOT NULL,
    run_id bigint,
    job_name text NOT NULL,
    partition_key text DEFAULT ''::text NOT NULL,
    stage text,
    status text NOT NULL,
    attempt integer NOT NULL,
    fence bigint NOT NULL,
    send_count integer DEFAULT 0 NOT NULL,
    confirmed_by text,
    result jsonb,
    error text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    sent_at timestamp with time zone,
    confirmed_at timestamp with time zone,
    CONSTRAINT effects_attempt_check CHECK ((attempt >= 1)),
    CONSTRAINT effects_confirmation CHECK (((status = 'confirmed'::text) = ((confirmed_at IS NOT NULL) AND (confirmed_by IS NOT NULL)))),
    CONSTRAINT effects_confirmed_by_check CHECK ((confirmed_by = ANY (ARRAY['send'::text, 'check'::text]))),
    CONSTRAINT effects_effect_key_check CHECK (((octet_length(effect_key) >= 1) AND (octet_length(effect_key) <= 2000))),
    CONSTRAINT effects_fence_check CHECK ((fence >= 1)),
    CONSTRAINT effects_send_count_check CHECK ((send_count >= 0)),
    CONSTRAINT effects_sent_counted CHECK (((status = 'planned'::text) OR (send_count >= 1))),
    CONSTRAINT effects_status_check CHECK ((status = ANY (ARRAY['planned'::text, 'sent'::text, 'confirmed'::text, 'failed'::text, 'unknown'::text])))
);

-- table instances
CREATE TABLE runner.instances (
    instance_id uuid NOT NULL,
    host text NOT NULL,
    pid integer NOT NULL,
    backend_pid integer,
    lock_namespace integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    heartbeat_at timestamp with time zone DEFAULT now() NOT NULL,
    stopped_at timestamp with time zone,
    runner_version text DEFAULT ''::text NOT NULL,
    jobs text[],
    login oid
);

-- comment COLUMN instances.jobs
COMMENT ON COLUMN runner.instances.jobs IS 'the jobs this runner process serves (its share of their slots is claimed by it first)';

-- comment COLUMN instances.login
COMMENT ON COLUMN runner.instances.login IS 'the role (pg_roles.oid) of the session that wrote backend_pid, set by a trigger from session_user; NULL when that session was not the writer''s own (or before revision 0024)';

-- table job_runs
CREATE TABLE runner.job_runs (
    id bigint NOT NULL,
    job_name text NOT NULL,
    schedule_slot timestamp with time zone NOT NULL,
    partition_key text DEFAULT ''::text NOT NULL,
    business_date date NOT NULL,
    window_start timestamp with time zone NOT NULL,
    window_end timestamp with time zone NOT NULL,
    status text NOT NULL,
    trigger text NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    fence bigint DEFAULT 0 NOT NULL,
    idempotency_key text NOT NULL,
    replay_group_id uuid,
    lane text DEFAULT 'realtime'::text NOT NULL,
    scheduled_at timestamp with time zone DEFAULT now() NOT NULL,
    next_attempt_at timestamp with time zone,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    processed_count bigint DEFAULT 0 NOT NULL,
    failed_count bigint DEFAULT 0 NOT NULL,
    last_error text,
    status_reason text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    uncounted_attempts integer DEFAULT 0 NOT NULL,
    coalesced_into_slot timestamp with time zone,
    CONSTRAINT job_runs_attempt_check CHECK ((attempt >= 0)),
    CONSTRAINT job_runs_fence_check CHECK ((fence >= 0)),
    CONSTRAINT job_runs_id_check CHECK ((id < '281474976710656'::bigint)),
    CONSTRAINT job_runs_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'dead'::text, 'skipped'::text, 'coalesced'::text, 'awaiting_approval'::text, 'cancelled'::text]))),
    CONSTRAINT job_runs_trigger_check CHECK ((trigger = ANY (ARRAY['schedule'::text, 'catch_up'::text, 'retry'::text, 'recovery'::text, 'manual'::text, 'backfill'::text]))),
    CONSTRAINT job_runs_uncounted_attempts_check CHECK ((uncounted_attempts >= 0)),
    CONSTRAINT job_runs_window CHECK ((window_start <= window_end))
)
WITH (autovacuum_vacuum_scale_factor='0.0', autovacuum_vacuum_threshold='100000', autovacuum_vacuum_insert_scale_factor='0.0', autovacuum_vacuum_insert_threshold='100000', autovacuum_analyze_scale_factor='0.0', autovacuum_analyze_threshold='100000');

-- table jobs
CREATE TABLE runner.jobs (
    job_name text NOT NULL,
    schedule_kind text NOT NULL,
    cron text,
    every_interval interval,
    timezone text DEFAULT 'UTC'::text NOT NULL,
    partitions text[],
    dynamic_partitions boolean DEFAULT false NOT NULL,
    max_attempts integer DEFAULT 3 NOT NULL,
    version text DEFAULT ''::text NOT NULL,
    options jsonb DEFAULT '{}'::jsonb NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    track_from timestamp with time zone NOT NULL,
    first_registered_at timestamp with time zone DEFAULT now() NOT NULL,
    synced_at timestamp with time zone DEFAULT now() NOT NULL,
    retired_at timestamp with time zone,
    in_code_at timestamp with time zone,
    CONSTRAINT jobs_job_name_check CHECK ((job_name <> ''::text)),
    CONSTRAINT jobs_max_attempts_check CHECK ((max_attempts >= 1)),
    CONSTRAINT jobs_schedule_kind_check CHECK ((schedule_kind = ANY (ARRAY['cron'::text, 'every'::text]))),
    CONSTRAINT jobs_schedule_shape CHECK ((((schedule_kind = 'cron'::text) AND (cron IS NOT NULL) AND (every_interval IS NULL)) OR ((schedule_kind = 'every'::text) AND (every_interval > '00:00:00'::interval) AND (cron IS NULL))))
);

-- comment COLUMN jobs.retired_at
COMMENT ON COLUMN runner.jobs.retired_at IS 'when the job was retired (runner retire); NULL while it is not';

-- comment COLUMN jobs.in_code_at
COMMENT ON COLUMN runner.jobs.in_code_at IS 'the newest heartbeat of a runner, since pruned from runner.instances, whose code defined the job';

-- table misfire_decisions
CREATE TABLE runner.misfire_decisions (
    run_id bigint NOT NULL,
    job_name text NOT NULL,
    schedule_slot timestamp with time zone NOT NULL,
    partition_key text NOT NULL,
    tier text NOT NULL,
    action text NOT NULL,
    lateness interval NOT NULL,
    slot_lateness interval NOT NULL,
    alert boolean DEFAULT false NOT NULL,
    reason text NOT NULL,
    backfill_id bigint,
    decided_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT misfire_decisions_action_check CHECK ((action = ANY (ARRAY['skip'::text, 'catch_up'::text, 'coalesce'::text, 'backfill'::text, 'approve'::text]))),
    CONSTRAINT misfire_decisions_reason_check CHECK ((btrim(reason) <> ''::text)),
    CONSTRAINT misfire_decisions_tier_check CHECK ((btrim(tier) <> ''::text))
);

-- sequence attempts_id_seq
ALTER TABLE runner.attempts ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME runner.attempts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- sequence backfills_id_seq
ALTER TABLE runner.backfills ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME runner.backfills_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- sequence effects_id_seq
ALTER TABLE runner.effects ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME runner.effects_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- table gap_holes
CREATE TABLE runner.gap_holes (
    job_name text NOT NULL,
    schedule_slot timestamp with time zone NOT NULL,
    whole_slot boolean NOT NULL,
    partition_key text NOT NULL,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT gap_holes_whole_slot CHECK (((NOT whole_slot) OR (partition_key = ''::text)))
);

-- table gap_watermarks
CREATE TABLE runner.gap_watermarks (
    job_name text NOT NULL,
    complete_through timestamp with time zone,
    schedule_from timestamp with time zone,
    track_from timestamp with time zone,
    advanced_at timestamp with time zone,
    pruned_through timestamp with time zone,
    prune_cursor timestamp with time zone
);

-- comment COLUMN gap_watermarks.prune_cursor
COMMENT ON COLUMN runner.gap_watermarks.prune_cursor IS 'runner.prune_v1: the slot at or below which the current sweep has looked at every run (NULL: the sweep starts at the bottom)';

-- table job_pauses
CREATE TABLE runner.job_pauses (
    job_name text NOT NULL,
    paused_from timestamp with time zone NOT NULL,
    paused_until timestamp with time zone,
    CONSTRAINT job_pauses_order CHECK (((paused_until IS NULL) OR (paused_until >= paused_from)))
);

-- table job_retirements
CREATE TABLE runner.job_retirements (
    job_name text NOT NULL,
    retired_from timestamp with time zone NOT NULL,
    retired_until timestamp with time zone,
    CONSTRAINT job_retirements_order CHECK (((retired_until IS NULL) OR (retired_until >= retired_from)))
);

-- sequence job_runs_id_seq
ALTER TABLE runner.job_runs ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME runner.job_runs_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- table job_schedules
CREATE TABLE runner.job_schedules (
    job_name text NOT NULL,
    valid_from timestamp with time zone NOT NULL,
    schedule_kind text NOT NULL,
    cron text,
    every_interval interval,
    timezone text NOT NULL,
    partitions text[],
    dynamic_partitions boolean DEFAULT false NOT NULL,
    CONSTRAINT job_schedules_schedule_kind_check CHECK ((schedule_kind = ANY (ARRAY['cron'::text, 'every'::text])))
);

-- table lanes
CREATE TABLE runner.lanes (
    lane text NOT NULL,
    rank integer NOT NULL,
    concurrency integer,
    rate double precision,
    tokens double precision DEFAULT 0 NOT NULL,
    tokens_at timestamp with time zone DEFAULT now() NOT NULL,
    builtin boolean DEFAULT false NOT NULL,
    description text,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT lanes_concurrency CHECK (((concurrency IS NULL) OR (concurrency >= 0))),
    CONSTRAINT lanes_name CHECK ((lane ~ '^[a-z][a-z0-9_]{0,39}$'::text)),
    CONSTRAINT lanes_rank CHECK (((rank >= 0) AND (rank <= 1000))),
    CONSTRAINT lanes_rate CHECK (((rate IS NULL) OR ((rate > (0)::double precision) AND (rate < 'Infinity'::double precision))))
);

-- comment TABLE lanes
COMMENT ON TABLE runner.lanes IS 'the lanes runs belong to: priority rank (lower first), fleet concurrency and rate of their queued runs';

-- comment COLUMN lanes.concurrency
COMMENT ON COLUMN runner.lanes.concurrency IS 'at most this many queued runs of the lane (retries, reruns, catch-up, backfills) running at once, fleet-wide; NULL: no limit';

-- comment COLUMN lanes.rate
COMMENT ON COLUMN runner.lanes.rate IS 'at most this many starts of queued runs per second, fleet-wide (a token bucket holding max(1, rate)); NULL: no limit';

-- table requests
CREATE TABLE runner.requests (
    id bigint NOT NULL,
    action text NOT NULL,
    job_name text,
    who text NOT NULL,
    reason text NOT NULL,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    db_user text DEFAULT SESSION_USER NOT NULL,
    touched jsonb DEFAULT '{}'::jsonb NOT NULL,
    CONSTRAINT requests_action_check CHECK ((action ~ '^[a-z][a-z_]*$'::text)),
    CONSTRAINT requests_reason_check CHECK ((btrim(reason) <> ''::text)),
    CONSTRAINT requests_touched_check CHECK ((jsonb_typeof(touched) = 'object'::text)),
    CONSTRAINT requests_who_check CHECK ((btrim(who) <> ''::text))
);

-- sequence requests_id_seq
ALTER TABLE runner.requests ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME runner.requests_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- table slot_fanouts
CREATE TABLE runner.slot_fanouts (
    job_name text NOT NULL,
    schedule_slot timestamp with time zone NOT NULL,
    partitions text[] NOT NULL,
    error text,
    recorded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT slot_fanouts_error CHECK (((error IS NULL) OR (cardinality(partitions) = 0)))
);

-- comment TABLE slot_fanouts
COMMENT ON TABLE runner.slot_fanouts IS 'the partitions a dynamic-partition job expects at each slot, as first computed';

-- constraint attempts attempts_pkey
ALTER TABLE ONLY runner.attempts
    ADD CONSTRAINT attempts_pkey PRIMARY KEY (id);

-- constraint attempts attempts_run_fence
ALTER TABLE ONLY runner.attempts
    ADD CONSTRAINT attempts_run_fence UNIQUE (run_id, fence);

-- constraint backfills backfills_pkey
ALTER TABLE ONLY runner.backfills
    ADD CONSTRAINT backfills_pkey PRIMARY KEY (id);

-- constraint backfills backfills_replay_group_id_key
ALTER TABLE ONLY runner.backfills
    ADD CONSTRAINT backfills_replay_group_id_key UNIQUE (replay_group_id);

-- constraint effects effects_key
ALTER TABLE ONLY runner.effects
    ADD CONSTRAINT effects_key UNIQUE (effect_key);

-- constraint effects effects_pkey
ALTER TABLE ONLY runner.effects
    ADD CONSTRAINT effects_pkey PRIMARY KEY (id);

-- constraint gap_holes gap_holes_pkey
ALTER TABLE ONLY runner.gap_holes
    ADD CONSTRAINT gap_holes_pkey PRIMARY KEY (job_name, schedule_slot, whole_slot, partition_key);

-- constraint gap_watermarks gap_watermarks_pkey
ALTER TABLE ONLY runner.gap_watermarks
    ADD CONSTRAINT gap_watermarks_pkey PRIMARY KEY (job_name);

-- constraint instances instances_pkey
ALTER TABLE ONLY runner.instances
    ADD CONSTRAINT instances_pkey PRIMARY KEY (instance_id);

-- constraint job_pauses job_pauses_pkey
ALTER TABLE ONLY runner.job_pauses
    ADD CONSTRAINT job_pauses_pkey PRIMARY KEY (job_name, paused_from);

-- constraint job_retirements job_retirements_pkey
ALTER TABLE ONLY runner.job_retirements
    ADD CONSTRAINT job_retirements_pkey PRIMARY KEY (job_name, retired_from);

-- constraint job_runs job_runs_business_key
ALTER TABLE ONLY runner.job_runs
    ADD CONSTRAINT job_runs_business_key UNIQUE (job_name, schedule_slot, partition_key);

-- constraint job_runs job_runs_pkey
ALTER TABLE ONLY runner.job_runs
    ADD CONSTRAINT job_runs_pkey PRIMARY KEY (id);

-- constraint job_schedules job_schedules_pkey
ALTER TABLE ONLY runner.job_schedules
    ADD CONSTRAINT job_schedules_pkey PRIMARY KEY (job_name, valid_from);

-- constraint jobs jobs_pkey
ALTER TABLE ONLY runner.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (job_name);

-- constraint lanes lanes_pkey
ALTER TABLE ONLY runner.lanes
    ADD CONSTRAINT lanes_pkey PRIMARY KEY (lane);

-- constraint misfire_decisions misfire_decisions_pkey
ALTER TABLE ONLY runner.misfire_decisions
    ADD CONSTRAINT misfire_decisions_pkey PRIMARY KEY (run_id);

-- constraint requests requests_pkey
ALTER TABLE ONLY runner.requests
    ADD CONSTRAINT requests_pkey PRIMARY KEY (id);

-- constraint slot_fanouts slot_fanouts_pkey
ALTER TABLE ONLY runner.slot_fanouts
    ADD CONSTRAINT slot_fanouts_pkey PRIMARY KEY (job_name, schedule_slot);

-- index attempts_abandoned
CREATE INDEX attempts_abandoned ON runner.attempts USING btree (finished_at DESC) WHERE (status = 'abandoned'::text);

-- index attempts_failed_finished
CREATE INDEX attempts_failed_finished ON runner.attempts USING btree (finished_at DESC) WHERE (status = ANY (ARRAY['failed'::text, 'timed_out'::text, 'dead'::text, 'abandoned'::text]));

-- index attempts_running
CREATE INDEX attempts_running ON runner.attempts USING btree (owner_instance) WHERE (status = 'running'::text);

-- index backfills_active
CREATE INDEX backfills_active ON runner.backfills USING btree (status, job_name) WHERE (status = ANY (ARRAY['planned'::text, 'running'::text, 'paused'::text]));

-- index effects_resent
CREATE INDEX effects_resent ON runner.effects USING btree (updated_at) WHERE (send_count > 1);

-- index effects_run
CREATE INDEX effects_run ON runner.effects USING btree (run_id);

-- index effects_unsettled
CREATE INDEX effects_unsettled ON runner.effects USING btree (updated_at) WHERE (status = ANY (ARRAY['sent'::text, 'unknown'::text]));

-- index instances_live
CREATE INDEX instances_live ON runner.instances USING btree (heartbeat_at) WHERE (stopped_at IS NULL);

-- index job_retirements_open
CREATE UNIQUE INDEX job_retirements_open ON runner.job_retirements USING btree (job_name) WHERE (retired_until IS NULL);

-- index job_runs_dead
CREATE INDEX job_runs_dead ON runner.job_runs USING btree (job_name, finished_at DESC) WHERE (status = 'dead'::text);

-- index job_runs_due
CREATE INDEX job_runs_due ON runner.job_runs USING btree (next_attempt_at) WHERE (status = ANY (ARRAY['pending'::text, 'failed'::text]));

-- index job_runs_lane_due
CREATE INDEX job_runs_lane_due ON runner.job_runs USING btree (lane, next_attempt_at) WHERE (status = ANY (ARRAY['pending'::text, 'failed'::text]));

-- index job_runs_lane_running
CREATE INDEX job_runs_lane_running ON runner.job_runs USING btree (lane) WHERE (status = 'running'::text);

-- index job_runs_replay_group
CREATE INDEX job_runs_replay_group ON runner.job_runs USING btree (replay_group_id, status) WHERE (replay_group_id IS NOT NULL);

-- index job_runs_replay_queue
CREATE INDEX job_runs_replay_queue ON runner.job_runs USING btree (replay_group_id, schedule_slot) WHERE ((replay_group_id IS NOT NULL) AND (status = ANY (ARRAY['pending'::text, 'failed'::text])));

-- index job_runs_running
CREATE INDEX job_runs_running ON runner.job_runs USING btree (job_name) WHERE (status = 'running'::text);

-- index job_runs_succeeded
CREATE INDEX job_runs_succeeded ON runner.job_runs USING btree (job_name, finished_at DESC) INCLUDE (started_at) WHERE (status = 'succeeded'::text);

-- index job_runs_unaccounted
CREATE INDEX job_runs_unaccounted ON runner.job_runs USING btree (job_name, schedule_slot) WHERE (status = ANY (ARRAY['pending'::text, 'running'::text, 'failed'::text, 'dead'::text, 'awaiting_approval'::text]));

-- index job_runs_unfinished
CREATE INDEX job_runs_unfinished ON runner.job_runs USING btree (job_name, schedule_slot) WHERE (status = ANY (ARRAY['pending'::text, 'running'::text, 'failed'::text]));

-- index misfire_decisions_alert
CREATE INDEX misfire_decisions_alert ON runner.misfire_decisions USING btree (job_name) WHERE alert;

-- index misfire_decisions_backfill
CREATE INDEX misfire_decisions_backfill ON runner.misfire_decisions USING btree (backfill_id) WHERE (backfill_id IS NOT NULL);

-- index misfire_decisions_job
CREATE INDEX misfire_decisions_job ON runner.misfire_decisions USING btree (job_name, schedule_slot);

-- index requests_job
CREATE INDEX requests_job ON runner.requests USING btree (job_name, requested_at DESC);

-- index requests_requested_at
CREATE INDEX requests_requested_at ON runner.requests USING btree (requested_at DESC);

-- fk constraint attempts attempts_run_id_fkey
ALTER TABLE ONLY runner.attempts
    ADD CONSTRAINT attempts_run_id_fkey FOREIGN KEY (run_id) REFERENCES runner.job_runs(id) ON DELETE CASCADE;

-- fk constraint effects effects_run_id_fkey
ALTER TABLE ONLY runner.effects
    ADD CONSTRAINT effects_run_id_fkey FOREIGN KEY (run_id) REFERENCES runner.job_runs(id) ON DELETE SET NULL;

-- fk constraint gap_holes gap_holes_job_name_fkey
ALTER TABLE ONLY runner.gap_holes
    ADD CONSTRAINT gap_holes_job_name_fkey FOREIGN KEY (job_name) REFERENCES runner.jobs(job_name) ON DELETE CASCADE;

-- fk constraint gap_watermarks gap_watermarks_job_name_fkey
ALTER TABLE ONLY runner.gap_watermarks
    ADD CONSTRAINT gap_watermarks_job_name_fkey FOREIGN KEY (job_name) REFERENCES runner.jobs(job_name) ON DELETE CASCADE;

-- fk constraint job_pauses job_pauses_job_name_fkey
ALTER TABLE ONLY runner.job_pauses
    ADD CONSTRAINT job_pauses_job_name_fkey FOREIGN KEY (job_name) REFERENCES runner.jobs(job_name) ON DELETE CASCADE;

-- fk constraint job_retirements job_retirements_job_name_fkey
ALTER TABLE ONLY runner.job_retirements
    ADD CONSTRAINT job_retirements_job_name_fkey FOREIGN KEY (job_name) REFERENCES runner.jobs(job_name) ON DELETE CASCADE;

-- fk constraint job_schedules job_schedules_job_name_fkey
ALTER TABLE ONLY runner.job_schedules
    ADD CONSTRAINT job_schedules_job_name_fkey FOREIGN KEY (job_name) REFERENCES runner.jobs(job_name) ON DELETE CASCADE;

-- fk constraint misfire_decisions misfire_decisions_backfill_id_fkey
ALTER TABLE ONLY runner.misfire_decisions
    ADD CONSTRAINT misfire_decisions_backfill_id_fkey FOREIGN KEY (backfill_id) REFERENCES runner.backfills(id) ON DELETE SET NULL;

-- fk constraint misfire_decisions misfire_decisions_run_id_fkey
ALTER TABLE ONLY runner.misfire_decisions
    ADD CONSTRAINT misfire_decisions_run_id_fkey FOREIGN KEY (run_id) REFERENCES runner.job_runs(id) ON DELETE CASCADE;

-- fk constraint slot_fanouts slot_fanouts_job_name_fkey
ALTER TABLE ONLY runner.slot_fanouts
    ADD CONSTRAINT slot_fanouts_job_name_fkey FOREIGN KEY (job_name) REFERENCES runner.jobs(job_name) ON DELETE CASCADE;

-- the built-in lanes (runner/lanes.py)
INSERT INTO runner.lanes (lane, rank, builtin, description) VALUES
    ('realtime', 0, true, 'live slots'),
    ('correction', 10, true, 'recent misses, small reprocessing, reruns'),
    ('manual', 20, true, 'approved high-risk work'),
    ('bulk', 30, true, 'large historical backfills');
