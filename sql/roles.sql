-- sql/roles.sql: the runner's database roles, for a DBA to review and apply.
--
-- Not a migration. Run it after `runner db upgrade`, and again after every upgrade (it is
-- idempotent: it creates what is missing, revokes what each role holds on the runner schema
-- and grants exactly what is listed below, so it also removes grants a newer file dropped).
-- Run it as the owner of the runner schema (the role that ran the migrations) or a
-- superuser, in the application's database:
--
--     psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -f sql/roles.sql
--
-- It creates three NOLOGIN group roles (cluster-wide, if they do not exist yet) and grants
-- them privileges in the current database only. What each can and cannot do is the role
-- matrix of the README ("Roles"); tests/security/ proves every line of it with real logins.
--
--   runner_readonly  USAGE on schema runner; SELECT on its tables and views, and EXECUTE on
--                    runner.end_web_session_v1 (a console's logout; shared with the
--                    operator). Nothing else: dashboards, psql on-call queries, `runner
--                    status` / `runs` / `gaps`, a `runner web` of viewers.
--   runner_worker    what `runner start` needs, and no more (revision 0007_security):
--                    SELECT on everything; INSERT of new jobs, new runs and their first
--                    attempts, slot fan-outs, effects and its own instance row (no write
--                    of the schedule history: runner.sync_schedule_v1 below); UPDATE only of a job's synced definition (not `paused`;
--                    track_from only earlier, by a trigger), of run progress counts, attempt
--                    heartbeats, effects, instances, and a plan's lane state (pause, complete,
--                    tokens, verification; by a trigger, no other status change). Every other
--                    state transition goes through fence-checked functions that run as the
--                    schema owner: runner.start_attempts_v1 (a new attempt, fence + 1),
--                    runner.finish_attempts_v1 (outcomes), runner.checkpoint_v1 (a fenced
--                    checkpoint, issue 33), runner.lane_budget_v1 and
--                    runner.lane_spend_v1 (a lane's fleet budget, revision 0011_lanes: no
--                    UPDATE of runner.lanes), runner.record_replay_plan_v1 and
--                    runner.tier_backfill_v1 (the only plans a runner makes: a verified
--                    replay's; a misfire tier's, through create_backfill_v1, audited in
--                    runner.requests with the worker's login; INSERT on
--                    runner.misfire_decisions records the tier) and runner.advance_watermarks_v1 and _v2 (the gap
--                    scan's watermarks: no direct write to gap_watermarks or gap_holes) and
--                    runner.prune_v1 (retention by the stored policy, a batch at a time) and
--                    runner.prune_instances_v1 (instance rows that stopped heartbeating long
--                    ago, revision 0016; the retention duty, not `runner prune`) and
--                    runner.sync_schedule_v1 (the schedule history, revision 0003_history:
--                    the only way a runner writes it, since issue 28 point 1; it dates a
--                    row from now, a job's first from its track_from, a re-assertion at most
--                    60 s back, and refuses a caller's as_of that is not now; a row dated
--                    into the past by anyone else, a superuser included, is reported by
--                    runner check as history_unexplained). No
--                    DELETE or TRUNCATE anywhere, no write to runner.requests, runner.job_pauses
--                    or runner.alembic_version, no UPDATE of a run's status, fence or attempt.
--   runner_operator  what runner_readonly has, plus EXECUTE on the action functions
--                    (runner.rerun_v1, set_job_paused_v1, decide_runs_v1, create_backfill_v1, _v2 and _v3,
--                    pause_backfill_v1, resume_backfill_v1, cancel_backfill_v1,
--                    record_backfill_verify_v1, retire_job_v1, unretire_job_v1, set_lane_v1; and
--                    prune_v1, which it shares with the worker): each checks the transition, writes the
--                    change and its runner.requests row (db_user = the login, not chosen by
--                    the caller) in one transaction. No INSERT or UPDATE on any table: an
--                    operator changes the ledger only through them, so only audited.
--
-- Choose other role names by setting them before the file runs, in the same session:
--
--     PGOPTIONS='-c runner.worker_role=app_runner -c runner.operator_role=app_oncall
--                -c runner.readonly_role=app_dashboards' psql "$DATABASE_URL" -f sql/roles.sql
--
-- Then give people and services LOGIN roles that are members of these groups:
--
--     CREATE ROLE runner_svc LOGIN PASSWORD '...' IN ROLE runner_worker;
--     CREATE ROLE alice LOGIN PASSWORD '...' IN ROLE runner_operator;
--
-- Takeover of hung owners (runner/takeover.py) ends their database session with
-- pg_terminate_backend, which needs membership in pg_signal_backend (or that every runner
-- logs in as the same role). That is a cluster-wide power, so this file does not grant it;
-- to allow it:  GRANT pg_signal_backend TO runner_worker;
-- Retention (deleting old ledger rows, revision 0009) runs as the schema owner inside
-- runner.prune_v1 (SECURITY DEFINER), which the worker role (the runners' background duty)
-- and the operator role (`runner prune`) may call: it applies the retention policy stored in
-- runner.jobs itself, so neither role holds DELETE on any ledger table, and runner.requests
-- is never pruned.
-- Run the migrations as a role of their own that owns the runner schema (e.g. runner_owner,
-- used by CI/CD only), and `runner start` as a member of runner_worker: the schema owner is
-- exempt from the audit's append-only trigger and runs every SECURITY DEFINER function, and
-- `runner start` warns when it is connected as the schema owner or as a superuser.

DO $roles$
DECLARE
    worker   text := coalesce(nullif(current_setting('runner.worker_role', true), ''), 'runner_worker');
    operator text := coalesce(nullif(current_setting('runner.operator_role', true), ''), 'runner_operator');
    readonly text := coalesce(nullif(current_setting('runner.readonly_role', true), ''), 'runner_readonly');
    r        text;
    t        record;
BEGIN
    IF to_regclass('runner.job_runs') IS NULL THEN
        RAISE EXCEPTION 'no runner schema in database %: run `runner db upgrade` first',
            current_database();
    END IF;

    -- the three group roles, and a clean slate on the runner schema for each
    FOREACH r IN ARRAY ARRAY[worker, operator, readonly] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('CREATE ROLE %I NOLOGIN', r);
        END IF;
        EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA runner FROM %I', r);
        EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA runner FROM %I', r);
        EXECUTE format('REVOKE ALL ON ALL FUNCTIONS IN SCHEMA runner FROM %I', r);
        EXECUTE format('REVOKE ALL ON SCHEMA runner FROM %I', r);
        EXECUTE format('GRANT USAGE ON SCHEMA runner TO %I', r);
        -- every role reads the ledger: tables and views
        EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA runner TO %I', r);
    END LOOP;

    -- every role may call the functions that run with its own privileges (the views' gap
    -- scan, slot expansion, the audit): harmless, and needed where PUBLIC lost EXECUTE.
    -- Functions that run as the schema owner (SECURITY DEFINER) are granted one by one below.
    FOR t IN
        SELECT p.oid::regprocedure AS fn
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'runner' AND NOT p.prosecdef AND p.prokind = 'f'
          AND p.prorettype <> 'trigger'::regtype
        ORDER BY 1
    LOOP
        FOREACH r IN ARRAY ARRAY[worker, operator, readonly] LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', t.fn, r);
        END LOOP;
    END LOOP;

    -- worker: inserts what a runner creates, updates only what column grants can bound;
    -- every other transition through the fence-checked functions
    EXECUTE format('GRANT INSERT (job_name, schedule_kind, cron, every_interval, timezone, partitions, '
                   'dynamic_partitions, max_attempts, version, options, paused, track_from, '
                   'first_registered_at, synced_at) ON runner.jobs TO %I', worker);
    EXECUTE format('GRANT UPDATE (schedule_kind, cron, every_interval, timezone, partitions, '
                   'dynamic_partitions, max_attempts, version, options, track_from, synced_at) '
                   'ON runner.jobs TO %I', worker);
    -- no write of runner.job_schedules (issue 28, point 1): runners append the schedule
    -- history only through runner.sync_schedule_v1 (revision 0003_history), which dates a row
    -- itself. A ledger still older than that function (this file run before `runner db
    -- upgrade`) keeps the plain INSERT its runners of 0002_objects and earlier use at start.
    IF to_regproc('runner.sync_schedule_v1') IS NULL THEN
        EXECUTE format('GRANT INSERT ON runner.job_schedules TO %I', worker);
    END IF;
    EXECUTE format('GRANT INSERT (job_name, schedule_slot, partition_key, business_date, window_start, '
                   'window_end, status, trigger, attempt, fence, idempotency_key, replay_group_id, lane, '
                   'scheduled_at, next_attempt_at, started_at, finished_at, status_reason, '
                   'coalesced_into_slot, updated_at) ON runner.job_runs TO %I', worker);
    EXECUTE format('GRANT UPDATE (processed_count, failed_count, updated_at) ON runner.job_runs TO %I',
                   worker);
    EXECUTE format('GRANT INSERT (run_id, attempt, fence, trigger, owner_host, owner_pid, owner_instance, '
                   'lock_key, owner_backend_pid, started_at, heartbeat_at) ON runner.attempts TO %I',
                   worker);
    EXECUTE format('GRANT UPDATE (heartbeat_at, owner_backend_pid) ON runner.attempts TO %I', worker);
    EXECUTE format('GRANT INSERT, UPDATE ON runner.effects TO %I', worker);
    EXECUTE format('GRANT INSERT, UPDATE ON runner.instances TO %I', worker);
    EXECUTE format('GRANT INSERT ON runner.slot_fanouts TO %I', worker);
    -- misfire tiers (revision 0012): which tier decided each run the misfire duty writes
    EXECUTE format('GRANT INSERT ON runner.misfire_decisions TO %I', worker);
    -- the misfire duty's ranges and their ruling (0004_expected): opened, advanced, closed
    EXECUTE format('GRANT INSERT, UPDATE (last_slot, next_slot, tier, action, lateness, closed_at) '
                   'ON runner.misfire_ranges TO %I',
                   worker);
    EXECUTE format('GRANT UPDATE (status, pause_reason, paused_at, pause_checked_at, finished_at, '
                   'updated_at, tokens, tokens_at, verify_status, verify_detail, verified_at) '
                   'ON runner.backfills TO %I', worker);
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA runner TO %I', worker);

    -- the functions that run as the schema owner, each to the role whose action it is
    FOR t IN
        SELECT p.oid::regprocedure AS fn, p.proname
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'runner' AND p.prosecdef
          AND p.proname IN ('start_attempts_v1', 'finish_attempts_v1', 'checkpoint_v1', 'record_replay_plan_v1',
                            'tier_backfill_v1', 'advance_watermarks_v1', 'advance_watermarks_v2', 'advance_watermarks_v3', 'rerun_v1', 'rerun_v2',
                            'set_job_paused_v1', 'rerun_runs_v1',
                            'decide_runs_v1', 'create_backfill_v1', 'create_backfill_v2', 'create_backfill_v3',
                            'pause_backfill_v1',
                            'resume_backfill_v1', 'cancel_backfill_v1', 'record_backfill_verify_v1',
                            'retire_job_v1', 'unretire_job_v1', 'prune_v1', 'lane_budget_v1',
                            'lane_spend_v1', 'set_lane_v1', 'prune_instances_v1', 'sync_schedule_v1',
                            'plan_range_v1', 'adopt_ledger_v1')
        ORDER BY 1
    LOOP
        -- prune_v1 (retention, revision 0009) to both: the runners' background duty and
        -- `runner prune`; it applies the stored policy itself, the caller picks only a batch size
        IF t.proname = 'prune_v1' THEN
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', t.fn, worker);
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', t.fn, operator);
            CONTINUE;
        END IF;
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', t.fn,
                       CASE WHEN t.proname IN ('start_attempts_v1', 'finish_attempts_v1', 'checkpoint_v1',
                                               'record_replay_plan_v1', 'tier_backfill_v1',
                                               'advance_watermarks_v1', 'advance_watermarks_v2', 'advance_watermarks_v3',
                                               'prune_instances_v1', 'sync_schedule_v1', 'plan_range_v1',
                                               'lane_budget_v1', 'lane_spend_v1')
                            THEN worker ELSE operator END);
    END LOOP;

    -- the console's logout (revision 0006_websessions): ends one `runner web` session by the
    -- hash of its random id. To the operator and the readonly role (a console of viewers may
    -- log in as either); it writes nothing of the ledger's history.
    IF to_regprocedure('runner.end_web_session_v1(text, text, timestamptz)') IS NOT NULL THEN
        EXECUTE format('GRANT EXECUTE ON FUNCTION runner.end_web_session_v1(text, text, timestamptz) TO %I, %I',
                       operator, readonly);
    END IF;
END
$roles$;

-- == the condition role (runner/conditions.py): a backfill's pause condition runs as it.
--
--   runner_condition  NOLOGIN, never a member of anything: USAGE on schema runner and
--                    SELECT on its tables and views (the ledger is what conditions usually
--                    read). It owns runner.pause_condition_v1, the SECURITY DEFINER
--                    function through which every runner evaluates a condition, so a
--                    condition runs as this role whatever the runner's login (a superuser
--                    included), and cannot SET ROLE back. It cannot write (the evaluation is
--                    read-only and rolled back), take table locks stronger than a read's
--                    (no UPDATE/DELETE/TRUNCATE privilege), end other sessions, read server
--                    files or run programs (not a superuser, in none of the pg_* roles).
--                    A condition that reads the application's tables needs them granted:
--                        GRANT SELECT ON app.orders TO runner_condition;
--                    Name it otherwise with  -c runner.condition_role=...  (as above).
--                    EXECUTE on runner.pause_condition_v1 goes to the worker (its runners
--                    evaluate conditions) and the operator (`runner backfill --pause-when`
--                    evaluates it once at creation); no one else.
--                    It owns runner.verify_query_v1 too, the same way: a job's verification
--                    SQL (runner/verification.py) runs as this role, with EXECUTE for the
--                    worker (verification when a plan completes) and the operator
--                    (`runner backfill verify`). Tables a verification reads need
--                    the same GRANT SELECT.
-- Until this file ran, the function refuses to evaluate (it is owned by the schema owner
-- then): plans with a pause_when pause, saying so.
DO $condition$
DECLARE
    condition text := coalesce(nullif(current_setting('runner.condition_role', true), ''), 'runner_condition');
    worker    text := coalesce(nullif(current_setting('runner.worker_role', true), ''), 'runner_worker');
    operator  text := coalesce(nullif(current_setting('runner.operator_role', true), ''), 'runner_operator');
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = condition) THEN
        EXECUTE format('CREATE ROLE %I NOLOGIN', condition);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = condition AND (rolsuper OR rolcanlogin)) THEN
        RAISE EXCEPTION 'role % can log in or is a superuser: the condition role must be a NOLOGIN role of its own',
            condition;
    END IF;
    EXECUTE format('REVOKE ALL ON ALL TABLES IN SCHEMA runner FROM %I', condition);
    EXECUTE format('REVOKE ALL ON ALL SEQUENCES IN SCHEMA runner FROM %I', condition);
    EXECUTE format('REVOKE ALL ON SCHEMA runner FROM %I', condition);
    EXECUTE format('GRANT USAGE ON SCHEMA runner TO %I', condition);
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA runner TO %I', condition);
    -- the function's owner: making a role the owner needs being able to SET ROLE to it
    -- (a superuser can) and that role holding CREATE on the schema for the moment
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
       AND NOT pg_has_role(current_user, condition, 'MEMBER') THEN
        BEGIN
            EXECUTE format('GRANT %I TO %I', condition, current_user);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'the schema owner % must be a member of the condition role % to make it the owner of runner.pause_condition_v1; as a superuser (or a role with CREATEROLE) run once: GRANT % TO %; then run this file again',
                current_user, condition, quote_ident(condition), quote_ident(current_user)
                USING ERRCODE = 'insufficient_privilege';
        END;
    END IF;
    EXECUTE format('GRANT CREATE ON SCHEMA runner TO %I', condition);
    EXECUTE format('ALTER FUNCTION runner.pause_condition_v1(text) OWNER TO %I', condition);
    IF to_regprocedure('runner.verify_query_v1(text, timestamptz, timestamptz, text, text[], integer)') IS NOT NULL THEN
        EXECUTE format('ALTER FUNCTION runner.verify_query_v1(text, timestamptz, timestamptz, text, text[], integer) '
                       'OWNER TO %I', condition);
        REVOKE ALL ON FUNCTION runner.verify_query_v1(text, timestamptz, timestamptz, text, text[], integer)
            FROM PUBLIC;
        EXECUTE format('GRANT EXECUTE ON FUNCTION runner.verify_query_v1(text, timestamptz, timestamptz, text, '
                       'text[], integer) TO %I, %I', worker, operator);
    END IF;
    EXECUTE format('REVOKE CREATE ON SCHEMA runner FROM %I', condition);
    REVOKE ALL ON FUNCTION runner.pause_condition_v1(text) FROM PUBLIC;
    EXECUTE format('GRANT EXECUTE ON FUNCTION runner.pause_condition_v1(text) TO %I, %I', worker, operator);
END
$condition$;
-- == end of the condition role
