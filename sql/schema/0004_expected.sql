-- 0004_expected: the misfire duty's late ranges, kept in the ledger (issue 26, suspicion: a tier
-- ruling kept only in memory). A runner hands the misfire duty ranges of late slots and decides
-- them in bounded passes; a range and its ruling (the misfire tier chosen by its lateness when
-- it was first decided) lived only in that process, so a runner killed midway left the rest of
-- the range undecided (the next runner's downtime starts at its newest complete slot, past the
-- range) or, ruled again later, decided it by another tier. Each range now has a row here from
-- its first pass: where the next pass starts, and the ruling; a starting runner takes the open
-- ones of its jobs first, with their ruling. Expand only: a new table no older runner names.
CREATE TABLE runner.misfire_ranges (
    job_name            text NOT NULL REFERENCES runner.jobs (job_name) ON DELETE CASCADE,
    first_slot          timestamptz NOT NULL,   -- where the range started (its key)
    last_slot           timestamptz NOT NULL,   -- its newest late slot
    next_slot           timestamptz,            -- where its next pass starts; NULL once done
    tier                text,                   -- misfire tiers: the tier that rules the range
    action              text,                   -- that tier's action
    lateness            interval,               -- the range's lateness when it was ruled
    opened_at           timestamptz NOT NULL DEFAULT now(),
    closed_at           timestamptz,            -- every slot of it decided
    PRIMARY KEY (job_name, first_slot),
    CONSTRAINT misfire_ranges_order CHECK (last_slot >= first_slot),
    CONSTRAINT misfire_ranges_ruling CHECK ((tier IS NULL) = (action IS NULL) AND (tier IS NULL) = (lateness IS NULL))
);
CREATE INDEX misfire_ranges_open ON runner.misfire_ranges (job_name, first_slot) WHERE closed_at IS NULL;
COMMENT ON TABLE runner.misfire_ranges IS
    'the misfire duty''s ranges of late slots and their tier ruling, so that a restart resumes them (runner/misfire.py)';
