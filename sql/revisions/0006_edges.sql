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
