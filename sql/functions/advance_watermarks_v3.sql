-- runner.advance_watermarks_v3(as_of, max_span, max_probes, tidy): the gap-scan watermark
-- advance (what a watermark means, the caps, the sharing of max_probes, concurrency, cost and
-- privileges: below), with these changes of issue 32 over the v2 of release 0011 for the
-- duty's many short calls:
--
--   * each cron of the locked jobs is parsed once per call (`specs`), where v2 parsed it once
--     for the job's density and again for every expansion (0.13 ms each, 1,000 times a call
--     for 500 cron jobs: most of a short call's fixed part);
--   * the watermark row of a job that reaches as_of is written only when it moves by at least
--     the job's shortest step between slots, is new, or follows a new schedule or track_from
--     (see `advanced`);
--   * creating a new job's watermark row never waits more than 50 ms on another call that is
--     creating it (v2 waited for that call's whole transaction: 42 s seen during a
--     100,000-run slot, two runners' first calls at once);
--   * a partition's probe for a run seeks its whole key (see `missing`).
--
-- The runners' duty (runner/worker/gapscan.py) and `runner gaps` call this one; v2 and v1
-- call it too, for runners of an older release while they run.
--
-- runner.advance_watermarks_v3(as_of, max_span, max_probes, tidy): move each job's gap-scan
-- watermark towards as_of (default now()), at most max_span past where it stands and at most
-- about max_probes slot x partition expansions in all (each job an even share, converted to a
-- span by the job's densest schedule: a job every second with 10,000 partitions gets a short
-- span, a daily one a long one; never less than one slot's step), so that runner.missing_slots
-- expands only the slots after it. Returns one row: `moved`, how many jobs' watermarks moved,
-- and `behind`, how many of the jobs it advanced are still short of as_of (call again, in a
-- new transaction, to go on). Both caps NULL: no cap (runner.advance_watermarks_v1 is that).
-- tidy (default true): also forget the holes under the watermark that have since got a run.
-- The loop's duty calls it until nothing is behind (runner/gapscan.py); `runner gaps` calls it
-- once first.
--
-- What a watermark means (runner.gap_watermarks, sql/schema/0001_baseline.sql): every expected
-- slot x partition at or below complete_through had a run row, in ANY status, or is recorded
-- in runner.gap_holes. The advance expands the slots between the job's (trusted) watermark
-- and its target exactly as the view does, records those with no run as holes, forgets holes
-- that have since got a run or that a newer schedule no longer expects, and sets
-- complete_through to the target with the schedule history and track_from it judged by.
--
-- Why "has a run row" and not "is accounted for": a run row never goes away (only pruning
-- deletes runs), whatever its status does later, so a watermark built on existence stays true
-- when a rerun or backfill reopens an old run (succeeded -> pending), and needs no triggers
-- and no cooperation from the code that reopens runs. The view finds runs that are not
-- accounted for through the partial index job_runs_unaccounted (wherever their slot), and
-- slots without a run below the watermark through runner.gap_holes. A run that is failed or
-- dead, or a slot never started, does not stop the watermark, so one forgotten slot cannot
-- make every later scan expand from it.
--
-- Why a cap (revision 0020_bounded). Without one, the first advance of an old ledger expands
-- its whole history in one statement: 92 s for 90 days of 1,000 jobs (29M runs), and a
-- statement that long holds a snapshot that keeps every vacuum of the database from removing
-- anything meanwhile (seen: autovacuum of the hot tables finding 100,000 dead versions "not yet
-- removable" for minutes). With the caps, one call expands a bounded number of slots: its
-- cost follows the budget, not the ledger's age, and catching up is a series of short
-- transactions. Any watermark is correct, so a partial advance never changes what the
-- gap scan lists: the view expands from wherever the watermark stands up to its as_of.
--
-- Concurrency. Safe from several processes at once: each job's watermark row is locked with
-- FOR UPDATE SKIP LOCKED, so a job being advanced elsewhere is skipped (it moves in that
-- call), and two callers never wait on each other except when both create the first
-- watermark row of a new job. The main statement reads the ledger after those locks are
-- held, with one snapshot: a run committed after it started is seen as missing, recorded as
-- a hole (harmless: the view and the next advance look for a run first). A schedule change
-- whose valid_from is below a watermark written without it (its transaction started before
-- the advance's) is caught by schedule_from: the view trusts the watermark only below that
-- change. Call it in READ COMMITTED (the default), in its own short transaction.
--
-- Cost: at most max_span of each job's slots and about max_probes (or one slot per job), plus one hash lookup per hole above the
-- watermark up to the target (holes a newer schedule may no longer expect: an anti-join
-- against the slots just expanded), plus, in a tidy call for a job at as_of, one index probe per
-- recorded hole under the watermark (a hole is a slot the view lists as never started; the
-- view probes the same holes on every scan, so this follows the size of its answer).
--
-- Privileges: it writes only derived data (runner.gap_watermarks and runner.gap_holes), so it
-- runs as its owner (SECURITY DEFINER, with a fixed search_path), and the roles of
-- sql/roles.sql need no DELETE for it. EXECUTE is revoked from PUBLIC: roles.sql grants it to
-- the worker role; `runner gaps` run by a role without it scans without advancing.
CREATE OR REPLACE FUNCTION runner.advance_watermarks_v3(
    as_of timestamptz DEFAULT NULL, max_span interval DEFAULT NULL, max_probes integer DEFAULT NULL,
    tidy boolean DEFAULT true, OUT moved integer, OUT behind integer)
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off  -- as for runner.missing_slots_v1: compiling costs more than running
AS $$
DECLARE
    clock constant timestamptz := coalesce(as_of, now());
    locked text[];
    saved_lock_timeout text;
BEGIN
    IF max_span IS NOT NULL AND max_span <= interval '0' THEN
        RAISE EXCEPTION 'max_span must be a positive interval, not %', max_span
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_probes IS NOT NULL AND max_probes <= 0 THEN
        RAISE EXCEPTION 'max_probes must be a positive number, not %', max_probes
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- A new job's first watermark row. Another call creating the same row waits here for that
    -- call's whole transaction (a unique key another open transaction inserted), so the wait
    -- is cut short: after 50 ms this call creates none (a subtransaction rolled back) and the
    -- new jobs, invisible to it until the other call commits, are moved by that call.
    saved_lock_timeout := current_setting('lock_timeout');
    BEGIN
        PERFORM set_config('lock_timeout', '50ms', true);
        INSERT INTO runner.gap_watermarks (job_name)
        SELECT j.job_name FROM runner.jobs j
        WHERE NOT EXISTS (SELECT 1 FROM runner.gap_watermarks w WHERE w.job_name = j.job_name)
        ORDER BY j.job_name
        ON CONFLICT (job_name) DO NOTHING;
        PERFORM set_config('lock_timeout', saved_lock_timeout, true);
    EXCEPTION WHEN lock_not_available THEN
        NULL;  -- (the setting went back with the subtransaction)
    END;

    SELECT coalesce(array_agg(l.job_name), '{}') INTO locked
    FROM (SELECT w.job_name FROM runner.gap_watermarks w
          ORDER BY w.job_name FOR UPDATE SKIP LOCKED) AS l;

    WITH specs AS MATERIALIZED (
        -- each cron of the locked jobs' schedules parsed once for the whole call (its density
        -- in `rated` and its expansion in `missing` both read it)
        SELECT c.cron, p.*
        FROM (SELECT DISTINCT s.cron FROM runner.job_schedules s
              WHERE s.job_name = ANY (locked) AND s.schedule_kind = 'cron') AS c
        CROSS JOIN LATERAL runner.cron_spec_v1(c.cron) AS p
    ), marks AS MATERIALIZED (
        SELECT j.job_name, j.track_from,
               (SELECT max(s.valid_from) FROM runner.job_schedules s
                WHERE s.job_name = j.job_name) AS schedule_from,
               -- never below what retention pruned (revision 0009): not expanded again
               greatest(
                   CASE WHEN w.complete_through IS NOT NULL AND w.track_from = j.track_from
                        THEN least(w.complete_through,
                                   (SELECT min(s.valid_from) FROM runner.job_schedules s
                                    WHERE s.job_name = j.job_name
                      AND s.valid_from > coalesce(w.schedule_from, timestamptz '-infinity'))
                                   - interval '1 microsecond')
                   END,
                   CASE WHEN w.pruned_through IS NOT NULL THEN least(w.pruned_through, clock) END) AS wm
        FROM runner.jobs j
        JOIN runner.gap_watermarks w ON w.job_name = j.job_name
        WHERE j.job_name = ANY (locked)
    ), rated AS MATERIALIZED (
        -- the job's densest schedule row, in slot x partition probes per second: an upper
        -- bound (a cron counts the minutes and hours its fields allow on every day; a dynamic
        -- job counts its last fan-out), and its shortest step between slots
        SELECT m.*,
               coalesce(m.wm, m.track_from - interval '1 microsecond') AS start,
               (SELECT max(CASE WHEN s.schedule_kind = 'every'
                                THEN 1.0 / greatest(extract(epoch FROM s.every_interval), 0.000001)
                                ELSE (SELECT bit_count(c.minutes::bit(64)) * bit_count(c.hours::bit(64))
                                      FROM specs c WHERE c.cron = s.cron) / 86400.0 END
                           * CASE WHEN NOT s.dynamic_partitions
                                  THEN greatest(coalesce(cardinality(s.partitions), 1), 1)
                                  ELSE greatest(coalesce((SELECT cardinality(f.partitions) FROM runner.slot_fanouts f
                                                          WHERE f.job_name = m.job_name
                                                          ORDER BY f.schedule_slot DESC LIMIT 1), 1), 1) END)
                FROM runner.job_schedules s WHERE s.job_name = m.job_name) AS rate,
               (SELECT min(CASE WHEN s.schedule_kind = 'every' THEN greatest(s.every_interval, interval '1 second')
                                ELSE interval '1 minute' END)
                FROM runner.job_schedules s WHERE s.job_name = m.job_name) AS step
        FROM marks m
    ), needs AS MATERIALIZED (
        -- goal: as far as this call may take the job (as_of, or max_span on); need: the probes
        -- that takes, at the job's rate; least: the probes of one step (one slot's partitions)
        SELECT r.job_name, r.track_from, r.schedule_from, r.wm, r.start, r.rate, r.step,
               least(clock, r.start + coalesce(max_span, interval '100 years')) AS goal,
               greatest(extract(epoch FROM least(clock, r.start + coalesce(max_span, interval '100 years'))
                                           - r.start), 0)::float8 * coalesce(nullif(r.rate, 0), 1.0 / 60) AS need,
               greatest(extract(epoch FROM r.step)::float8 * coalesce(nullif(r.rate, 0), 1.0 / 60), 1) AS least_probes
        FROM rated r
    ), ranked AS MATERIALIZED (
        -- Sharing max_probes (revision 0022_probes): water-filling over the jobs still short
        -- of their goal, the least needy first. Job r (by need, of k) would get level
        -- (max_probes - the needs of those before it) / (k - r + 1) if all before it were
        -- satisfied and all from it on shared the rest evenly; the first job whose need
        -- exceeds its level sets the level of every job from it on. So a job that needs a few
        -- probes (a daily job, one caught up but for seconds) takes them and no more, and the
        -- budget left goes to the jobs with the most history, where an even share gave each
        -- job the same whether it needed it or not (the catch-up of a 30M ledger crawled at
        -- 100 probes a job a call while most jobs were done).
        SELECT n.*, row_number() OVER w AS rn, count(*) OVER () AS k,
               coalesce(sum(n.need) OVER (w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS need_before
        FROM needs n
        WHERE n.start < n.goal
        WINDOW w AS (ORDER BY n.need, n.job_name)
    ), leveled AS MATERIALIZED (
        SELECT r.*,
               (SELECT min(q.rn) FROM ranked q
                WHERE q.need > (max_probes - q.need_before) / (q.k - q.rn + 1)) AS first_short
        FROM ranked r
    ), shared AS MATERIALIZED (
        -- each job's probes: its need, or the level, but never less than one step (so that a
        -- job moves at least one slot); jobs are then taken in the same order while the
        -- probes of those before them are under max_probes, so a call costs about max_probes
        -- (at least one job's step) however many jobs are behind; a job not taken stays where
        -- it is, behind, and is taken once the needier ones ahead of it are done
        SELECT l.job_name,
               CASE WHEN l.first_short IS NULL OR l.rn < l.first_short THEN l.need
                    ELSE least(l.need, greatest(l.least_probes,
                                               (max_probes - f.need_before) / (f.k - f.rn + 1))) END AS probes
        FROM leveled l
        LEFT JOIN ranked f ON f.rn = l.first_short
    ), taken AS MATERIALIZED (
        SELECT s.job_name, s.probes,
               coalesce(sum(s.probes) OVER (ORDER BY r.rn ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0)
                   < max_probes AS taken
        FROM shared s JOIN ranked r ON r.job_name = s.job_name
    ), base AS MATERIALIZED (
        -- target: where this call's expansion of the job ends (its new complete_through)
        SELECT n.job_name, n.track_from, n.schedule_from, n.wm, n.start, n.step,
               CASE WHEN n.start >= n.goal OR max_probes IS NULL THEN n.goal
                    WHEN NOT t.taken THEN n.start
                    WHEN t.probes >= n.need THEN n.goal
                    ELSE least(n.goal, n.start + make_interval(secs => least(
                             t.probes / coalesce(nullif(n.rate, 0), 1.0 / 60), 3.0e9))) END AS target
        FROM needs n
        LEFT JOIN taken t ON t.job_name = n.job_name
    ), segments AS (
        SELECT b.job_name, s.schedule_kind, c.minutes, c.hours, c.days_of_month, c.months,
               c.days_of_week, c.day_and, s.every_interval, s.timezone,
               s.partitions, s.dynamic_partitions,
               greatest(s.lo, b.track_from - interval '1 microsecond', b.wm, t.lo) AS lo,
               least(s.hi, b.target, t.hi) AS hi
        FROM base b
        -- slots of retired spans are not expected (runner.tracked_spans_v1, revision 0009)
        CROSS JOIN LATERAL runner.tracked_spans_v1(b.job_name) AS t
        CROSS JOIN LATERAL (
            SELECT h.*,
                   CASE WHEN lag(h.valid_from) OVER w IS NULL THEN timestamptz '-infinity'
                        ELSE h.valid_from - interval '1 microsecond' END AS lo,
                   coalesce(lead(h.valid_from) OVER w - interval '1 microsecond',
                            timestamptz 'infinity') AS hi
            FROM runner.job_schedules h
            WHERE h.job_name = b.job_name
            WINDOW w AS (ORDER BY h.valid_from)
        ) AS s
        LEFT JOIN specs c ON s.schedule_kind = 'cron' AND c.cron = s.cron
    ), missing AS MATERIALIZED (
        -- (LATERAL ... LIMIT 1: one index probe per slot, never a hash anti-join that would
        -- read every run of the ledger because the slot estimates are large defaults)
        SELECT g.job_name, x.slot, p.key IS NULL AS whole_slot, coalesce(p.key, '') AS partition_key
        FROM segments g
        CROSS JOIN LATERAL runner.schedule_slots_v2(
            g.schedule_kind, g.minutes, g.hours, g.days_of_month, g.months, g.days_of_week,
            g.day_and, g.every_interval, g.timezone, g.lo, g.hi) AS x(slot)
        LEFT JOIN runner.slot_fanouts f ON g.dynamic_partitions AND f.job_name = g.job_name
                                       AND f.schedule_slot = x.slot AND f.error IS NULL
        CROSS JOIN LATERAL unnest(CASE WHEN NOT g.dynamic_partitions THEN coalesce(g.partitions, ARRAY[''])
                                       WHEN f.job_name IS NOT NULL THEN f.partitions
                                       ELSE ARRAY[NULL::text] END) AS p(key)
        -- (the probe is runner.slot_run_v1, inlined: no run's id, so the key's index answers
        -- alone, an index-only scan, where fetching the id read a heap page per probe:
        -- revision 0022_probes; and a partition's probe seeks the whole key, where v2's
        -- `p.key IS NULL OR r.partition_key = p.key` sought (job, slot) and read the slot's
        -- runs until it met the partition: half the slot's partitions per probe, 80 s for
        -- the 100,000 probes of one slot of 100 jobs x 1,000 partitions, issue 32)
        LEFT JOIN LATERAL runner.slot_run_v1(g.job_name, x.slot, p.key) AS run(found) ON true
        WHERE g.lo < g.hi AND run.found IS NULL
    ), forgotten_outside AS (
        -- Holes outside the trusted watermark (a newer schedule, a moved track_from) stay only
        -- if expanded again just now. Only those up to the target are judged: a hole above it
        -- is not read by the view (it trusts holes at or below the watermark only) and is
        -- judged by the call that expands its slot. Two index ranges per job, so a call reads
        -- the holes of the span it expands, not every hole the job has (a NOT EXISTS at the
        -- top of the WHERE: a hash anti-join against `missing`).
        DELETE FROM runner.gap_holes h
        USING base b
        WHERE h.job_name = b.job_name
          AND h.schedule_slot >= b.track_from
          AND h.schedule_slot > coalesce(b.wm, timestamptz '-infinity')
          AND h.schedule_slot <= b.target
          AND NOT EXISTS (SELECT 1 FROM missing m
                          WHERE m.job_name = h.job_name AND m.slot = h.schedule_slot
                            AND m.whole_slot = h.whole_slot AND m.partition_key = h.partition_key)
    ), forgotten_before AS (
        -- holes before track_from (it moved): never expected again
        DELETE FROM runner.gap_holes h
        USING base b
        WHERE h.job_name = b.job_name
          AND h.schedule_slot < b.track_from
    ), forgotten_inside AS (
        -- Holes the trusted watermark covers stay until they get a run: one index probe per
        -- hole. A whole-slot hole goes once every partition recorded for the slot (if any
        -- was recorded after it; else one run) has a run. Only when `tidy` and for a job that
        -- reaches as_of: this is cleanup (the view probes each hole for a run itself), and on
        -- every step of a long catch-up it would probe all the job's holes again each time
        -- (the duty steps with tidy off, then makes one tidy call once nothing is behind).
        DELETE FROM runner.gap_holes h
        USING base b
        WHERE tidy AND h.job_name = b.job_name AND b.target = clock
          AND b.wm IS NOT NULL AND h.schedule_slot <= b.wm AND h.schedule_slot >= b.track_from
          AND NOT EXISTS (
              SELECT 1
              FROM unnest(CASE WHEN NOT h.whole_slot THEN ARRAY[h.partition_key]
                               ELSE coalesce((SELECT f.partitions FROM runner.slot_fanouts f
                                              WHERE f.job_name = h.job_name
                                                AND f.schedule_slot = h.schedule_slot
                                                AND f.error IS NULL),
                                             ARRAY[NULL::text]) END) AS k(key)
              WHERE NOT EXISTS (SELECT 1 FROM runner.slot_run_v1(h.job_name, h.schedule_slot, k.key)))
    ), recorded AS (
        INSERT INTO runner.gap_holes (job_name, schedule_slot, whole_slot, partition_key, recorded_at)
        SELECT m.job_name, m.slot, m.whole_slot, m.partition_key, clock FROM missing m
        ON CONFLICT DO NOTHING
    ), advanced AS (
        -- A job that reaches as_of has its row written only when its watermark moves by at
        -- least the job's shortest step between slots (or is new, or follows a new schedule
        -- or track_from): a job caught up but for seconds keeps its row, and the next call
        -- expands from it again (less than a step of slots). A job still behind is written
        -- (its share, at least a step: a test on the step there could miss by the rounding of
        -- probes / rate and hold the job where it is). Rewriting every job's row on every call
        -- left 528,000 dead row versions after one 10M-run catch-up, read by every later call.
        UPDATE runner.gap_watermarks w
        SET complete_through = b.target,
            schedule_from = b.schedule_from,
            track_from = b.track_from,
            advanced_at = now()
        FROM base b
        WHERE w.job_name = b.job_name
          AND b.start < b.target
          AND (b.wm IS NULL OR b.wm < b.target)
          AND (b.wm IS NULL OR b.target < clock OR b.target >= b.wm + b.step
               OR w.complete_through IS DISTINCT FROM b.wm
               OR w.schedule_from IS DISTINCT FROM b.schedule_from
               OR w.track_from IS DISTINCT FROM b.track_from)
        RETURNING b.target
    )
    -- behind: every job short of as_of, also those this call did not take
    SELECT (SELECT count(*) FROM advanced)::integer,
           (SELECT count(*) FROM base b WHERE b.target < clock)::integer
    INTO moved, behind;
END
$$;

REVOKE ALL ON FUNCTION runner.advance_watermarks_v3(timestamptz, interval, integer, boolean) FROM PUBLIC;
