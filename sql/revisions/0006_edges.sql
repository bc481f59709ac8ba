-- Revision 0006_edges: Edges: one way to start an attempt, expected partitions recorded per slot.

-- == expected partitions of a slot, recorded when first computed =============================
-- A job with dynamic partitions (a callable of the slot) expects whatever the callable
-- returned; only the code knows that, so the loop records it here, in its own transaction,
-- BEFORE it claims any of the slot's runs. The gap scan and the misfire duty then expect
-- every recorded partition (a partial fan-out, a shutdown between claims, a row that cannot
-- be stored all leave visible holes), and a slot with no fan-out row still shows once,
-- without a partition. The first fan-out recorded for a slot wins (ON CONFLICT DO NOTHING):
-- every runner then works from the same set. A callable that raised is recorded with its
-- error and no partitions: the slot shows in the gap scan (state fanout_failed) and alerts.
CREATE TABLE runner.slot_fanouts (
    job_name            text NOT NULL REFERENCES runner.jobs (job_name) ON DELETE CASCADE,
    schedule_slot       timestamptz NOT NULL,
    partitions          text[] NOT NULL,
    error               text,
    recorded_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_name, schedule_slot),
    CONSTRAINT slot_fanouts_error CHECK (error IS NULL OR cardinality(partitions) = 0)
);
COMMENT ON TABLE runner.slot_fanouts IS
    'the partitions a dynamic-partition job expects at each slot, as first computed';

-- == pause history ===========================================================================
-- When each job was paused, whoever paused it (an operator's audited `runner pause`, or
-- `paused=True` in code): slots that fell due while a job was paused are not late slots for
-- the misfire duty to decide (a restart must not turn them into `skipped`); they stay in the
-- gap scan, to be backfilled or skipped by an operator. Kept by a trigger on runner.jobs, so
-- no writer of `paused` can forget it. paused_until is NULL while the pause lasts.
CREATE TABLE runner.job_pauses (
    job_name            text NOT NULL REFERENCES runner.jobs (job_name) ON DELETE CASCADE,
    paused_from         timestamptz NOT NULL,
    paused_until        timestamptz,
    PRIMARY KEY (job_name, paused_from),
    CONSTRAINT job_pauses_order CHECK (paused_until IS NULL OR paused_until >= paused_from)
);

CREATE FUNCTION runner.record_pause_v1() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.paused AND (TG_OP = 'INSERT' OR NOT OLD.paused) THEN
        INSERT INTO runner.job_pauses (job_name, paused_from)
        VALUES (NEW.job_name, clock_timestamp())
        ON CONFLICT DO NOTHING;
    ELSIF TG_OP = 'UPDATE' AND OLD.paused AND NOT NEW.paused THEN
        UPDATE runner.job_pauses SET paused_until = clock_timestamp()
        WHERE job_name = NEW.job_name AND paused_until IS NULL;
    END IF;
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION runner.record_pause_v1() FROM PUBLIC;

CREATE TRIGGER jobs_record_pause
AFTER INSERT OR UPDATE OF paused ON runner.jobs
FOR EACH ROW EXECUTE FUNCTION runner.record_pause_v1();

-- jobs paused before this revision: paused since they were last synced (the best we know)
INSERT INTO runner.job_pauses (job_name, paused_from)
SELECT job_name, synced_at FROM runner.jobs WHERE paused;
