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
-- them privileges in the current database only:
--
--   runner_readonly  USAGE on schema runner; SELECT on its tables and views. Nothing else:
--                    dashboards, psql on-call queries, `runner status` / `runs` / `gaps`.
--   runner_worker    what `runner start` needs: SELECT on everything; INSERT and UPDATE on
--                    every ledger table except runner.requests (the operators' audit) and
--                    runner.alembic_version; USAGE on the schema's sequences; EXECUTE on its
--                    functions. No DELETE or TRUNCATE anywhere, no write to runner.requests.
--   runner_operator  what runner_readonly has, plus what `runner rerun` / `pause` / `resume`
--                    (and `approve` / `skip`) write: INSERT on runner.requests (action,
--                    job_name, who, reason, touched only: requested_at and db_user keep their
--                    defaults, so the audit says truly when and as whom), UPDATE of
--                    runner.jobs.paused, and UPDATE of a run's status, trigger, schedule of
--                    its next attempt, counts and reason. An operator cannot change a run's
--                    fence, attempt, slot, partition or key, nor UPDATE/DELETE a request.
--                    `runner backfill` also inserts plans (runner.backfills) and the runs
--                    they add (not their fence, attempt or id), tags runs with a plan's
--                    group and lane, and changes a plan's state (pause, resume, cancel).
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
-- Retention (deleting old ledger rows) runs as the schema owner, not as these roles.
-- The views call runner functions (e.g. the gap scan's) with the reader's privileges; that
-- relies on PostgreSQL's default EXECUTE for PUBLIC. If your cluster revokes it, also grant
-- EXECUTE ON ALL FUNCTIONS IN SCHEMA runner to runner_readonly and runner_operator.

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

    -- worker: writes the ledger, never deletes from it, never writes the audit
    FOR t IN
        SELECT c.relname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'runner' AND c.relkind IN ('r', 'p')
          AND c.relname NOT IN ('requests', 'alembic_version')
        ORDER BY c.relname
    LOOP
        EXECUTE format('GRANT INSERT, UPDATE ON runner.%I TO %I', t.relname, worker);
    END LOOP;
    EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA runner TO %I', worker);
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA runner TO %I', worker);

    -- operator: the audit row of every action, and the few columns the actions change
    EXECUTE format('GRANT INSERT (action, job_name, who, reason, touched) ON runner.requests TO %I',
                   operator);
    EXECUTE format('GRANT UPDATE (paused) ON runner.jobs TO %I', operator);
    EXECUTE format('GRANT UPDATE (status, trigger, next_attempt_at, uncounted_attempts, finished_at, '
                   'processed_count, failed_count, status_reason, updated_at) '
                   'ON runner.job_runs TO %I', operator);
    -- == backfills (revision 0003): `runner backfill` writes its plan, the runs it adds
    -- (never a fence, attempt or id) and tags existing ones with its group and lane; its
    -- pause, resume and cancel change the plan's state. (`approve`/`skip` need only the run
    -- columns above.)
    EXECUTE format('GRANT INSERT (job_name, range_from, range_to, partitions, lane, concurrency, rate, '
                   'max_failures, pause_when, force, status, expected_runs, tokens, tokens_at, '
                   'requested_by, reason, created_at, updated_at) ON runner.backfills TO %I', operator);
    EXECUTE format('GRANT UPDATE (status, pause_reason, paused_at, finished_at, updated_at, max_failures, '
                   'tokens, tokens_at) ON runner.backfills TO %I', operator);
    EXECUTE format('GRANT INSERT (job_name, schedule_slot, partition_key, business_date, window_start, '
                   'window_end, status, trigger, idempotency_key, replay_group_id, lane, scheduled_at, '
                   'status_reason, updated_at) ON runner.job_runs TO %I', operator);
    EXECUTE format('GRANT UPDATE (replay_group_id, lane, coalesced_into_slot) ON runner.job_runs TO %I',
                   operator);
    -- == end of backfills
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
        EXECUTE format('GRANT %I TO %I', condition, current_user);
    END IF;
    EXECUTE format('GRANT CREATE ON SCHEMA runner TO %I', condition);
    EXECUTE format('ALTER FUNCTION runner.pause_condition_v1(text) OWNER TO %I', condition);
    EXECUTE format('REVOKE CREATE ON SCHEMA runner FROM %I', condition);
    REVOKE ALL ON FUNCTION runner.pause_condition_v1(text) FROM PUBLIC;
    EXECUTE format('GRANT EXECUTE ON FUNCTION runner.pause_condition_v1(text) TO %I, %I', worker, operator);
END
$condition$;
-- == end of the condition role
