-- runner.expected_spans_v1: WHEN a job's slots are expected -- the one definition of that
-- (issue 26, "defined once"). The misfire duty, misfire tiers and the ledger audit read it;
-- runner.expected_slots_v1 (the slots themselves) is built on it.
--
-- A slot s of a job is *owed* when it is
--   * tracked:      s >= runner.jobs.track_from (first registration, or an explicit track_from);
--   * not retired:  not retired_from < s < retired_until for any runner.job_retirements row
--                   (an open retirement: not s > retired_from), as `runner retire`/`unretire`
--                   promise: the slots between a retirement and its end are never owed;
--   * due:          s <= as_of (default now()): a slot exactly at now is due, one after is not;
-- and *expected* when it is owed and also
--   * not paused:   not paused_from <= s < paused_until for any runner.job_pauses row (an open
--                   pause: not s >= paused_from). A pause is not an outage: a slot that fell due
--                   while the job was paused was not late, so no misfire policy or tier decides
--                   it and no lateness counts the paused time.
-- Which instants are slots at all is the schedule history's (runner.expected_slots_v1).
--
-- Returns the owed time as ordered, non-overlapping spans, each either expected (paused
-- false) or paused (paused true). What the gap scan lists is every owed slot without a run:
-- README promises that the slots a pause left without a run stay listed (paused = true), to
-- be backfilled or skipped by an operator; they are just not late.
--
-- Multiranges (PostgreSQL 14+): tracked, within runner.tracked_spans_v1 (the complement of
-- the retirements, which the gap scan and its watermarks read too), gives the owed spans; the
-- pauses' union splits them. One call reads the job's row, its retirements and its pauses (a few
-- rows each): cheap enough per job per call, not meant per slot.
CREATE OR REPLACE FUNCTION runner.expected_spans_v1(job text, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (span tstzrange, paused boolean)
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
WITH clock AS (
    SELECT coalesce(expected_spans_v1.as_of, now()) AS now
), owed AS (
    -- tracked and due, within the spans the job was not retired (runner.tracked_spans_v1,
    -- the one reading of runner.job_retirements: lo < slot <= hi)
    SELECT CASE WHEN j.track_from <= c.now
                THEN tstzmultirange(tstzrange(j.track_from, c.now, '[]'))
                ELSE '{}'::tstzmultirange END
           -- ((lo, hi] as [lo + 1 us, hi]: the same instants, and the measure of time that
           -- the outage sums has no microsecond too many)
           * coalesce((SELECT range_agg(tstzrange(t.lo + interval '1 microsecond', t.hi, '[]'))
                       FROM runner.tracked_spans_v1(expected_spans_v1.job) AS t
                       WHERE t.lo < t.hi), '{}'::tstzmultirange) AS m
    FROM runner.jobs j CROSS JOIN clock c
    WHERE j.job_name = expected_spans_v1.job
), pauses AS (
    SELECT coalesce(range_agg(tstzrange(p.paused_from, coalesce(p.paused_until, timestamptz 'infinity'), '[)')),
                    '{}'::tstzmultirange) AS m
    FROM runner.job_pauses p
    WHERE p.job_name = expected_spans_v1.job
)
SELECT u.span, u.paused
FROM owed o CROSS JOIN pauses p
CROSS JOIN LATERAL (SELECT s, false FROM unnest(o.m - p.m) AS s
                    UNION ALL
                    SELECT s, true FROM unnest(o.m * p.m) AS s) AS u(span, paused)
ORDER BY lower(u.span)
$$;

-- who may expand slots (runner.schedule_slots_v1) may ask when they are expected, from the
-- moment this file is applied (sql/roles.sql grants every SECURITY INVOKER function again)
DO $grants$
DECLARE
    grantee regrole;
BEGIN
    FOR grantee IN
        SELECT a.grantee::regrole
        FROM pg_catalog.pg_proc p
        CROSS JOIN LATERAL aclexplode(p.proacl) AS a
        WHERE p.oid = 'runner.schedule_slots_v1(text, text, interval, text, timestamptz, timestamptz)'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION runner.expected_spans_v1(text, timestamptz) TO %s', grantee);
    END LOOP;
END
$grants$;
