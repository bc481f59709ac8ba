-- Revision 0002_faults: Faults: takeover, leases, timeouts, overlap, the effect log.

-- == runs and attempts: hand-over and leases ==================================================
-- Attempts that do not count against max_attempts (released at shutdown, or before a manual
-- rerun): a run is out of automatic attempts when attempt - uncounted_attempts >= max_attempts.
ALTER TABLE runner.job_runs
    ADD COLUMN uncounted_attempts integer NOT NULL DEFAULT 0 CHECK (uncounted_attempts >= 0);

-- The session that holds an attempt's lock, so a hung owner (lock held, heartbeat older than
-- the lease) can be named and, past its lease, ended with pg_terminate_backend.
ALTER TABLE runner.attempts ADD COLUMN owner_backend_pid integer;

-- Attempts whose heartbeat is checked against their job's lease.
CREATE INDEX attempts_running_heartbeat ON runner.attempts (heartbeat_at) WHERE status = 'running';

-- == effects: the effect log ==================================================================
-- One row per side effect outside the database (an email, a payment, a file delivered),
-- under a key the handler chooses (typically derived from ctx.idempotency_key). The key is
-- global and unique: whatever run, attempt or process meets a key again sees what became of
-- it. runner/effects.py is the one writer; its docstring states what is guaranteed.
--
--   planned    announced (ctx.effect(key, stage=...) without send), nothing sent yet
--   sent       about to be sent / in flight; if it stays so, the sender died or lost the
--              database before recording the outcome: delivery is unknown
--   confirmed  send returned (confirmed_by 'send'), or a handler's check found it
--              delivered (confirmed_by 'check'); never sent again
--   failed     send raised an error that says it was not delivered; sent again next time
--   unknown    send timed out: must be resolved by a check before anything is sent again
--
-- run_id, attempt and fence are those of the attempt that last changed the row. Pruning a
-- run keeps its effects (run_id becomes NULL): the key, not the run, is what prevents a
-- second send.
CREATE TABLE runner.effects (
    id                  bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    effect_key          text NOT NULL CHECK (octet_length(effect_key) BETWEEN 1 AND 2000),
    run_id              bigint REFERENCES runner.job_runs (id) ON DELETE SET NULL,
    job_name            text NOT NULL,
    partition_key       text NOT NULL DEFAULT '',
    stage               text,
    status              text NOT NULL CHECK (status IN (
                            'planned', 'sent', 'confirmed', 'failed', 'unknown')),
    attempt             integer NOT NULL CHECK (attempt >= 1),
    fence               bigint NOT NULL CHECK (fence >= 1),
    send_count          integer NOT NULL DEFAULT 0 CHECK (send_count >= 0),
    confirmed_by        text CHECK (confirmed_by IN ('send', 'check')),
    result              jsonb,
    error               text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    sent_at             timestamptz,
    confirmed_at        timestamptz,
    CONSTRAINT effects_key UNIQUE (effect_key),
    CONSTRAINT effects_sent_counted CHECK (status = 'planned' OR send_count >= 1),
    CONSTRAINT effects_confirmation CHECK (
        (status = 'confirmed') = (confirmed_at IS NOT NULL AND confirmed_by IS NOT NULL))
);

-- a run's effects and stages (runner.run_stages), and the effects of pruned runs
CREATE INDEX effects_run ON runner.effects (run_id);
-- effects whose delivery is not settled (alerts: unknown or in-flight effects)
CREATE INDEX effects_unsettled ON runner.effects (updated_at) WHERE status IN ('sent', 'unknown');
