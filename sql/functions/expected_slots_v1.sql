-- runner.expected_slots_v1: the slots a job owes in [from_ts, to_ts], each flagged paused or
-- not -- the one SQL definition of *expected* slots (issue 26): the slots of the schedule
-- history (runner.job_schedules: a slot s is judged by the row with the greatest
-- valid_from <= s, and by the earliest row when s precedes every row), within the owed spans
-- of runner.expected_spans_v1 (tracked, not retired, due by as_of). A slot is expected when
-- it is owed and not paused (paused = false); a paused one (paused = true) fell due while the
-- job was paused: not late, never decided by a misfire policy, still listed by the gap scan.
--
-- Users: the misfire duty and misfire tiers (sql/queries/misfire.sql: which late slots of a
-- range they decide, which is the newest, how long the job was missing), and the ledger audit
-- (runner.check_v1: the slots the gap scan must list). The gap scan (runner.missing_slots_v1)
-- keeps its own, watermarked expansion for speed (see its header), clipped to the same
-- retired spans and the same schedule rows; the audit checks that the two agree.
--
-- Columns: schedule_slot, partitions (the static partitions of its schedule row, NULL when
-- unpartitioned), dynamic_partitions, paused. Ordered by slot. Each call expands only
-- [from_ts, to_ts] (clipped to the owed spans), so a caller pages a long range by passing a
-- bounded window.
CREATE OR REPLACE FUNCTION runner.expected_slots_v1(
    job text, from_ts timestamptz, to_ts timestamptz, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (schedule_slot timestamptz, partitions text[], dynamic_partitions boolean, paused boolean)
LANGUAGE sql STABLE PARALLEL SAFE
-- as in runner.missing_slots_v1: the slot expansions' default estimates would make JIT
-- compile a plan that runs in milliseconds
SET jit = off
AS $$
SELECT x.slot, h.partitions, h.dynamic_partitions, e.paused
FROM runner.expected_spans_v1(expected_slots_v1.job, expected_slots_v1.as_of) AS e
CROSS JOIN LATERAL (
    -- each schedule row governs (lo, hi]: from its valid_from (the first row: from the start
    -- of time) until the next row's
    SELECT s.*,
           CASE WHEN lag(s.valid_from) OVER w IS NULL THEN timestamptz '-infinity'
                ELSE s.valid_from - interval '1 microsecond' END AS lo,
           coalesce(lead(s.valid_from) OVER w - interval '1 microsecond', timestamptz 'infinity') AS hi
    FROM runner.job_schedules s
    WHERE s.job_name = expected_slots_v1.job
    WINDOW w AS (ORDER BY s.valid_from)
) AS h
-- the bounds as (lo, hi], the convention of runner.schedule_slots_v1
CROSS JOIN LATERAL (
    SELECT greatest(h.lo, expected_slots_v1.from_ts - interval '1 microsecond',
                    CASE WHEN lower_inc(e.span) THEN lower(e.span) - interval '1 microsecond'
                         ELSE lower(e.span) END) AS lo,
           least(h.hi, expected_slots_v1.to_ts,
                 CASE WHEN upper_inc(e.span) THEN upper(e.span)
                      ELSE upper(e.span) - interval '1 microsecond' END) AS hi
) AS b
CROSS JOIN LATERAL runner.schedule_slots_v1(h.schedule_kind, h.cron, h.every_interval, h.timezone,
                                            b.lo, b.hi) AS x(slot)
WHERE b.lo < b.hi
ORDER BY x.slot
$$;

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
        EXECUTE format('GRANT EXECUTE ON FUNCTION runner.expected_slots_v1(text, timestamptz, timestamptz, timestamptz) TO %s',
                       grantee);
    END LOOP;
END
$grants$;
