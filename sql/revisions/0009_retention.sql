-- Revision 0009_retention: retiring jobs, retention (pruning), the duties' lock keys.
--
-- Expand only: new columns are nullable, new tables are new, views and functions keep their
-- columns and signatures (the views gain columns at the end), so runners of revision
-- 0008_audit keep working beside this schema while a deploy rolls (README: "Upgrading").

-- == retiring a job ==========================================================================
-- `runner retire JOB` (runner.retire_job_v1, audited) sets retired_at: after that instant the
-- job's slots are no longer expected (gap scan, alerts, health, the ledger audit), no runner
-- starts its slots, retries or reruns after it, and a runner whose code defines the job
-- refuses to start until `runner unretire JOB`. Its history stays until retention prunes it.
-- NULL: not retired.
ALTER TABLE runner.jobs ADD COLUMN retired_at timestamptz;
COMMENT ON COLUMN runner.jobs.retired_at IS
    'when the job was retired (runner retire); NULL while it is not';

-- Every retirement, with its end: slots s with retired_from < s < retired_until are not
-- expected, whatever happened later (an unretired job does not owe the slots it was retired
-- for). Written only by the retire/unretire functions (they run as the owner); read by the
-- gap scan through runner.tracked_spans_v1.
CREATE TABLE runner.job_retirements (
    job_name            text NOT NULL REFERENCES runner.jobs (job_name) ON DELETE CASCADE,
    retired_from        timestamptz NOT NULL,
    retired_until       timestamptz,
    PRIMARY KEY (job_name, retired_from),
    CONSTRAINT job_retirements_order CHECK (retired_until IS NULL OR retired_until >= retired_from)
);
CREATE UNIQUE INDEX job_retirements_open ON runner.job_retirements (job_name)
    WHERE retired_until IS NULL;

-- The spans of a job's slots that are expected (lo < slot <= hi): the complement of its
-- retirements. A job never retired has one span (-infinity, infinity). The gap scan, the
-- watermark advance and the ledger audit clip their slot expansion to these spans.
CREATE FUNCTION runner.tracked_spans_v1(job text)
RETURNS TABLE (lo timestamptz, hi timestamptz)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT coalesce(lag(r.retired_until) OVER w - interval '1 microsecond', timestamptz '-infinity'),
           r.retired_from
    FROM runner.job_retirements r
    WHERE r.job_name = job
    WINDOW w AS (ORDER BY r.retired_from)
    UNION ALL
    SELECT coalesce((SELECT max(r.retired_until) FROM runner.job_retirements r WHERE r.job_name = job)
                    - interval '1 microsecond', timestamptz '-infinity'),
           timestamptz 'infinity'
    WHERE NOT EXISTS (SELECT 1 FROM runner.job_retirements r
                      WHERE r.job_name = job AND r.retired_until IS NULL)
$$;

-- == retention ===============================================================================
-- The newest slot below which retention (runner.prune_v1) deleted runs of the job. Pruning
-- deletes only runs that account for their slot and only below a trusted watermark, so at or
-- below pruned_through every expected slot had a run or is a recorded hole (gap_holes): the
-- gap scan and the watermark advance never expand slots there again (not even after a
-- schedule or track_from change that would otherwise make them re-expand: the pruned slots
-- would look missing), and the ledger audit expands expected slots only above it.
ALTER TABLE runner.gap_watermarks ADD COLUMN pruned_through timestamptz;

-- the views that read the new columns are replaced (they are re-created from sql/views right
-- after this file; DROP first: CREATE OR REPLACE cannot insert a column in the middle)
DROP VIEW runner.alerts;
DROP VIEW runner.job_health;
