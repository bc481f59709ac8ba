-- Revision 0004_operators: the operators' audit trail, and the indexes behind the on-call
-- views. The views themselves are separate files applied right after this one
-- (sql/views/job_health.sql, sql/views/alerts.sql). Grants are not part of migrations: a
-- DBA applies sql/roles.sql.

-- == requests: every operator action, append-only =========================================
-- One row per action that changed the ledger on an operator's behalf (rerun, pause, resume;
-- later backfill, approve, skip, cancel). `who` is what the operator claimed (--by, default
-- OS user@host); `db_user` is the database login that wrote the row, which the operator
-- cannot choose (sql/roles.sql grants INSERT on the other columns only). `touched` says
-- what the action changed: run ids, slots, partitions, jobs, and their state before and
-- after, e.g. {"runs": [{"run_id": 7, "slot": "...", "partition_key": "",
-- "before": {"status": "dead", ...}, "after": {"status": "pending", ...}}]}.
CREATE TABLE runner.requests (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action              text NOT NULL CHECK (action ~ '^[a-z][a-z_]*$'),
    job_name            text,
    who                 text NOT NULL CHECK (btrim(who) <> ''),
    reason              text NOT NULL CHECK (btrim(reason) <> ''),
    requested_at        timestamptz NOT NULL DEFAULT now(),
    db_user             text NOT NULL DEFAULT session_user,
    touched             jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(touched) = 'object')
);

CREATE INDEX requests_requested_at ON runner.requests (requested_at DESC);
CREATE INDEX requests_job ON runner.requests (job_name, requested_at DESC);

-- Append-only for everyone but the table's owner (the role that runs the migrations, e.g.
-- for retention) and superusers: UPDATE, DELETE and TRUNCATE are refused even if a role
-- was granted them by mistake. sql/roles.sql grants none of them in the first place.
CREATE FUNCTION runner.requests_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_has_role(current_user,
                       (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = TG_RELID),
                       'MEMBER') THEN
        RAISE EXCEPTION 'runner.requests is append-only: % refused for role %', TG_OP, current_user
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER requests_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON runner.requests
    FOR EACH STATEMENT EXECUTE FUNCTION runner.requests_append_only();

-- == indexes of runner.job_health and runner.alerts ========================================
-- last success, the last 100 successful durations (p95), successes of the last 24 hours
CREATE INDEX job_runs_succeeded ON runner.job_runs (job_name, finished_at DESC)
    WHERE status = 'succeeded';
-- lag (the oldest unfinished due slot of each job) is served by job_runs_unaccounted
-- (revision 0003), whose statuses include pending, running and failed: one index fewer to
-- maintain on every claim.
-- dead runs wait for a human
CREATE INDEX job_runs_dead ON runner.job_runs (job_name, finished_at DESC) WHERE status = 'dead';
-- abandoned attempts of the last 24 hours
CREATE INDEX attempts_abandoned ON runner.attempts (finished_at DESC) WHERE status = 'abandoned';
