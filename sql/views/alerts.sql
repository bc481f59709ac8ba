-- runner.alerts: what needs a human now, one row per problem, shown by `runner status`
-- below its table. Plain SQL on the ledger, usable from psql with no runner alive; "now" is
-- the database's. Columns: kind, job_name, owner, run_id (NULL when no run is involved),
-- detail (one line for a human), since (when the problem began).
--
--   dead       every run in status dead (no more automatic attempts): it stays an alert
--              until an operator reruns, skips or cancels it
--   abandoned  attempts closed as abandoned (their owner died) in the last 24 hours
--   slow       a run running, or succeeded in the last 24 hours, for longer than 2 x the
--              p95 of the job's last 100 successful durations (run duration = finished_at
--              - started_at of its latest attempt). Needs at least 20 successes; durations
--              under 1 second never alert (the threshold is at least 1 s)
--   stale      a job with a stale_after (@app.job(stale_after=...), kept in runner.jobs
--              as options.stale_after_seconds) whose last success (or, never having
--              succeeded, its registration) is older than that
--   late       the latest slot whose deadline (slot + grace) has passed is not done: one of
--              its runs is not succeeded/skipped/coalesced/cancelled, or a run is missing.
--              grace is the job's grace (@app.job(grace=...), options.grace_seconds; 60 s
--              unless the job says otherwise): give a job that takes minutes a grace of
--              that order. A job row without grace_seconds gets 300 seconds. Slots of
--              every= jobs are computed here (whole multiples of the interval since the
--              epoch); for cron jobs the latest slot is the newest one in the ledger, so a
--              cron slot that never got a run (every runner down) is not "late" here: it is
--              in the gap scan (runner.missing_slots), and stale_after catches the silence.
--   backfill_paused  a backfill plan paused, by itself (max_failures, pause_when) or by an
--              operator: the detail says why; it alerts until resumed or cancelled
--   effect_unknown    an effect whose delivery is unknown (unknown, or sent long ago with no
--              attempt of its run running)
--   effect_duplicate  an effect sent more than once
--   lock_squatter     a session that is not a registered runner session holds an advisory
--              key of a runner lock namespace (any role that can connect can take any key):
--              the run it holds cannot be recovered, a run due to take the key fails
--              (runner.LockUnavailable, counted against max_attempts). Registered: the
--              rule of runner.runner_sessions_v1 (since revision 0024_sessions; written out
--              here before, and it took every runner session of a role the viewer is not a
--              member of for a squatter). Runners end such sessions where their role may
--              (pg_signal_backend); the detail names it
--   job_not_in_code   a job (not retired) that no live runner defines in its code (the jobs
--              each runner records in runner.instances.jobs at start) and that none has
--              defined for longer than the threshold: the setting runner.job_not_in_code_after
--              (an interval, 24 hours unless set, e.g. ALTER DATABASE app SET
--              runner.job_not_in_code_after = '6 hours'). Only while some runner is live (a
--              fleet that is down is not evidence). It is never retired silently: an
--              operator retires it (runner retire) or puts it back in the code. Last defined:
--              the newest of the job's last sync, runner.jobs.in_code_at (what the instance
--              rows retention deleted knew: runner.prune_instances_v1, revision 0016) and the
--              newest heartbeat of a remaining instance with the job in its code
--   misfire_tier      a misfire tier that alerts the owner (runner/tiers.py: backfill and
--              approve by default; also a range held because the job's side effects were
--              not checked) decided missed slots whose work is still open: the plan it
--              created is not finished, or its runs still await approval. One row per job,
--              tier and plan (runner.misfire_decisions, revision 0012)
--   definition_conflict  live runners run different definitions of one job's schedule (two
--              code versions: a rollout under way, or an old version restarted during it): the
--              detail names each fingerprint with its schedule and the runners (host, pid) that
--              run it, and which one the schedule history holds. The history is never
--              rewritten back and forth meanwhile (runner.sync_schedule_v1, revision
--              0026_history): it keeps the definition a live runner runs, and a runner whose
--              definition is not the history's re-asserts it once the other version's runners
--              are gone. Live: not stopped, heartbeat within the last 15 s, its lock session
--              connected (runner.runner_sessions_v1). Since: the newer of the two runners' starts
--   bad_setting       a setting this view reads is set (ALTER DATABASE/ROLE ... SET, SET) to
--              something it cannot use: runner.job_not_in_code_after not an interval above
--              zero and at most 100 years in the forms runner.interval_setting_v1 reads
--              ('6 hours', '1 day 12 hours', '06:30'). The branch that reads it
--              uses its default instead (24 hours), so a typo never makes this view fail;
--              the detail names the setting and its value (quoted, cut at 200 characters)
--              (revision 0023_settings)
--
-- Retired jobs (runner retire) raise no stale or late alerts: their slots after the
-- retirement are not expected; their dead runs still alert.
--
-- Paused jobs get no stale or late alerts (they are silent on purpose: runner.requests says
-- who paused them and why); their dead, abandoned and slow runs still alert.
--
-- Other duties add their kinds as further UNION ALL branches at the end (see the hooks
-- there), with the same six columns.
CREATE OR REPLACE VIEW runner.alerts AS
WITH job AS (
    SELECT j.job_name,
           j.options ->> 'owner' AS owner,
           j.paused,
           j.schedule_kind,
           j.every_interval,
           j.partitions,
           j.track_from,
           j.first_registered_at,
           j.retired_at,
           j.synced_at,
           j.in_code_at,
           CASE WHEN (j.options ->> 'stale_after_seconds') ~ '^[0-9]+([.][0-9]+)?$'
                THEN make_interval(secs => (j.options ->> 'stale_after_seconds')::float8)
           END AS stale_after,
           coalesce(
               CASE WHEN (j.options ->> 'grace_seconds') ~ '^[0-9]+([.][0-9]+)?$'
                    THEN make_interval(secs => (j.options ->> 'grace_seconds')::float8)
               END,
               interval '300 seconds') AS grace
    FROM runner.jobs j
)
-- dead: no more automatic attempts
SELECT 'dead'::text AS kind,
       r.job_name,
       job.owner,
       r.id AS run_id,
       format('run %s, slot %s%s: dead after %s attempt(s): %s',
              r.id, r.schedule_slot,
              CASE WHEN r.partition_key <> '' THEN format(', partition %L', r.partition_key) ELSE '' END,
              r.attempt, left(coalesce(r.last_error, r.status_reason, 'no error recorded'), 300)
       ) AS detail,
       coalesce(r.finished_at, r.updated_at) AS since
FROM runner.job_runs r
LEFT JOIN job ON job.job_name = r.job_name
WHERE r.status = 'dead'

UNION ALL
-- abandoned: an attempt whose owner died before recording an outcome
SELECT 'abandoned',
       r.job_name,
       job.owner,
       r.id,
       format('run %s, slot %s%s: attempt %s (fence %s) on %s pid %s was abandoned: %s; the run is now %s',
              r.id, r.schedule_slot,
              CASE WHEN r.partition_key <> '' THEN format(', partition %L', r.partition_key) ELSE '' END,
              a.attempt, a.fence, a.owner_host, a.owner_pid,
              left(coalesce(a.error_message, 'owner lost'), 200), r.status),
       a.finished_at
FROM runner.attempts a
JOIN runner.job_runs r ON r.id = a.run_id
LEFT JOIN job ON job.job_name = r.job_name
WHERE a.status = 'abandoned'
  AND a.finished_at >= now() - interval '24 hours'

UNION ALL
-- slow: over 2 x the p95 of the job's last 100 successful durations
SELECT 'slow',
       job.job_name,
       job.owner,
       c.id,
       format('run %s, slot %s%s: %s %ss, over 2 x the p95 (%ss) of the last %s successful runs',
              c.id, c.schedule_slot,
              CASE WHEN c.partition_key <> '' THEN format(', partition %L', c.partition_key) ELSE '' END,
              CASE c.status WHEN 'running' THEN 'running for' ELSE 'took' END,
              round(extract(epoch FROM c.duration), 1), round(p.p95::numeric, 1), p.n),
       c.started_at + p.threshold
FROM job
CROSS JOIN LATERAL (
    SELECT d.p95, d.n, greatest(make_interval(secs => 2 * d.p95), interval '1 second') AS threshold
    FROM (
        SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY last.seconds) AS p95, count(*) AS n
        FROM (
            SELECT extract(epoch FROM s.finished_at - s.started_at)::float8 AS seconds
            FROM runner.job_runs s
            WHERE s.job_name = job.job_name AND s.status = 'succeeded'
              AND s.started_at IS NOT NULL AND s.finished_at IS NOT NULL
            ORDER BY s.finished_at DESC
            LIMIT 100
        ) last
    ) d
    WHERE d.n >= 20
) p
CROSS JOIN LATERAL (
    -- the longest success of the last 24 hours, from the index alone (job_runs_succeeded
    -- covers started_at): only a job with one over the threshold reads those runs' rows
    -- (revision 0016_health; before, every job fetched every success of its last day)
    SELECT max(s.finished_at - s.started_at) AS longest
    FROM runner.job_runs s
    WHERE s.job_name = job.job_name AND s.status = 'succeeded'
      AND s.finished_at >= now() - interval '24 hours'
) day
JOIN LATERAL (
    SELECT r.id, r.schedule_slot, r.partition_key, r.status, r.started_at,
           now() - r.started_at AS duration
    FROM runner.job_runs r
    WHERE r.job_name = job.job_name AND r.status = 'running'
    UNION ALL
    SELECT r.id, r.schedule_slot, r.partition_key, r.status, r.started_at,
           r.finished_at - r.started_at
    FROM runner.job_runs r
    WHERE r.job_name = job.job_name AND r.status = 'succeeded'
      AND r.finished_at >= now() - interval '24 hours'
      AND day.longest > p.threshold
) c ON c.duration > p.threshold

UNION ALL
-- stale: no success for longer than the job's stale_after
SELECT 'stale',
       job.job_name,
       job.owner,
       ls.id,
       CASE WHEN ls.id IS NULL
            THEN format('no success since the job was registered at %s (stale_after %ss)',
                        job.first_registered_at, trim_scale(extract(epoch FROM job.stale_after)))
            ELSE format('last success at %s (run %s, slot %s) is older than stale_after (%ss)',
                        ls.finished_at, ls.id, ls.schedule_slot, trim_scale(extract(epoch FROM job.stale_after)))
       END,
       coalesce(ls.finished_at, job.first_registered_at) + job.stale_after
FROM job
LEFT JOIN LATERAL (
    SELECT r.id, r.finished_at, r.schedule_slot
    FROM runner.job_runs r
    WHERE r.job_name = job.job_name AND r.status = 'succeeded'
    ORDER BY r.finished_at DESC
    LIMIT 1
) ls ON true
WHERE job.stale_after IS NOT NULL
  AND NOT job.paused
  AND job.retired_at IS NULL
  AND coalesce(ls.finished_at, job.first_registered_at) + job.stale_after < now()

UNION ALL
-- late: the latest slot past its deadline (slot + grace) is not done
SELECT 'late',
       job.job_name,
       job.owner,
       due.open_run_id,
       format('slot %s: not done by %s (grace %ss): %s',
              s.slot, s.slot + job.grace, trim_scale(extract(epoch FROM job.grace)),
              CASE WHEN due.runs = 0 THEN 'no run at all'
                   ELSE format('%s of %s run(s) done%s', due.done,
                               greatest(due.runs, coalesce(cardinality(job.partitions), 1)),
                               coalesce('; open: ' || due.open_statuses, ''))
              END),
       s.slot + job.grace
FROM job
CROSS JOIN LATERAL (
    SELECT CASE
               WHEN job.schedule_kind = 'every' THEN
                   -- the latest whole multiple of the interval since the epoch, at or before
                   -- now - grace; in microseconds, exact (to_timestamp(0), not a timestamptz
                   -- literal: a view keeps a literal as text in the creating session's zone)
                   to_timestamp(0) + interval '1 microsecond' * (
                       floor(extract(epoch FROM now() - job.grace)
                             / extract(epoch FROM job.every_interval))
                       * extract(epoch FROM job.every_interval) * 1000000)::bigint
               ELSE (SELECT max(r.schedule_slot) FROM runner.job_runs r
                     WHERE r.job_name = job.job_name AND r.schedule_slot <= now() - job.grace)
           END AS slot
) s
CROSS JOIN LATERAL (
    SELECT count(*) AS runs,
           count(*) FILTER (WHERE r.status IN ('succeeded', 'skipped', 'coalesced', 'cancelled')) AS done,
           min(r.id) FILTER (WHERE r.status NOT IN ('succeeded', 'skipped', 'coalesced', 'cancelled'))
               AS open_run_id,
           string_agg(DISTINCT r.status, ', ')
               FILTER (WHERE r.status NOT IN ('succeeded', 'skipped', 'coalesced', 'cancelled'))
               AS open_statuses
    FROM runner.job_runs r
    WHERE r.job_name = job.job_name AND r.schedule_slot = s.slot
) due
WHERE NOT job.paused
  AND job.retired_at IS NULL
  AND s.slot IS NOT NULL
  AND s.slot >= job.track_from
  AND (due.runs = 0 OR due.done < due.runs OR due.done < coalesce(cardinality(job.partitions), 1))

UNION ALL
-- backfill_paused: a backfill plan that paused itself (max_failures, pause_when) or was paused
-- by an operator (runner.backfills, revision 0003; runner/backfill.py)
SELECT 'backfill_paused',
       b.job_name,
       job.owner,
       NULL::bigint,
       format('backfill %s paused: %s', b.id, coalesce(b.pause_reason, 'no reason recorded')),
       coalesce(b.paused_at, b.updated_at)
FROM runner.backfills b LEFT JOIN job ON job.job_name = b.job_name
WHERE b.status = 'paused'

UNION ALL
-- effect_unknown: a side effect whose delivery is unknown: status unknown (a send timed out),
-- or sent more than 5 minutes ago and never confirmed while no attempt of its run is running
-- (the sender died mid-send). The next attempt must resolve it with the handler's check.
SELECT 'effect_unknown',
       e.job_name,
       job.owner,
       e.run_id,
       format('effect %s (stage %s) is %s since %s: delivery unknown until a check resolves it',
              e.effect_key, coalesce(e.stage, '-'), e.status, e.updated_at),
       e.updated_at
FROM runner.effects e LEFT JOIN job ON job.job_name = e.job_name
WHERE e.status = 'unknown'
   OR (e.status = 'sent' AND e.updated_at < now() - interval '5 minutes'
       AND NOT EXISTS (SELECT 1 FROM runner.job_runs r
                       WHERE r.id = e.run_id AND r.status = 'running'))

UNION ALL
-- effect_duplicate: a side effect sent more than once (allowed only after a check said the
-- earlier send was not delivered; worth a look either way)
SELECT 'effect_duplicate',
       e.job_name,
       job.owner,
       e.run_id,
       format('effect %s (stage %s) was sent %s times', e.effect_key, coalesce(e.stage, '-'),
              e.send_count),
       e.updated_at
FROM runner.effects e LEFT JOIN job ON job.job_name = e.job_name
WHERE e.send_count > 1

UNION ALL
-- lock_squatter: one row per session that is not a registered runner session and holds
-- advisory keys of a runner lock namespace (namespace = the key's top 16 bits, run id = its
-- low 48 bits); job_name and run_id: the least of those of its keys' runs that exist
SELECT 'lock_squatter',
       min(sq.job_name),
       min(sq.owner),
       min(sq.run_id),
       format('session %s (user %s, application %s) is not a registered runner session and holds '
              '%s advisory key(s) of runner lock namespace %s (runs %s%s): a run it holds cannot '
              'be recovered, a run due to take its key fails; end it (pg_terminate_backend), or '
              'give the runners a lock namespace of their own (RUNNER_LOCK_NAMESPACE)',
              sq.pid, coalesce(quote_literal(min(sq.usename)::text COLLATE "default"), '?'),
              coalesce(quote_literal(min(sq.application_name)), '?'), count(*),
              string_agg(DISTINCT sq.namespace::text, ', '),
              string_agg(sq.key_run || CASE WHEN sq.run_id IS NULL THEN ' (not created yet)'
                                            ELSE ' (' || sq.status || ')' END, ', ' ORDER BY sq.key_run)
                  FILTER (WHERE sq.n <= 10),
              CASE WHEN count(*) > 10 THEN ', ...' ELSE '' END),
       min(sq.backend_start)
FROM (
    SELECT l.pid, a.usename, a.application_name, a.backend_start, l.classid::bigint >> 16 AS namespace,
           ((l.classid::bigint & 65535) << 32) | l.objid::bigint AS key_run,
           r.id AS run_id, r.job_name, r.status, job.owner,
           row_number() OVER (PARTITION BY l.pid ORDER BY l.classid, l.objid) AS n
    FROM pg_locks l
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    LEFT JOIN runner.job_runs r ON r.id = ((l.classid::bigint & 65535) << 32) | l.objid::bigint
    LEFT JOIN job ON job.job_name = r.job_name
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND (l.classid::bigint >> 16) IN (SELECT i.lock_namespace FROM runner.instances i)
      AND l.pid NOT IN (SELECT runner.runner_sessions_v1())
) sq
GROUP BY sq.pid

UNION ALL
-- job_not_in_code: defined by no live runner for longer than runner.job_not_in_code_after
-- (revision 0009; a setting that is not a usable interval counts as unset, 24 hours, and
-- raises a bad_setting alert: revision 0023_settings). Live: not stopped, heartbeat within the last 15 s (3 instance heartbeats,
-- as the shares count them). Last defined: the newest heartbeat of any runner, live or not,
-- whose code had the job (the instance rows kept, one pass over them for every job, and
-- runner.jobs.in_code_at for those retention deleted: revision 0016_health), else the job's
-- last sync.
SELECT 'job_not_in_code',
       job.job_name,
       job.owner,
       NULL::bigint,
       format('job %s is in no live runner''s code since %s (longer than %s): retire it '
              '(runner retire) or deploy it again', quote_literal(job.job_name), seen.at,
              limits.after),
       seen.at + limits.after
FROM job
CROSS JOIN LATERAL (
    SELECT coalesce(runner.interval_setting_v1('runner.job_not_in_code_after'),
                    interval '24 hours') AS after
) limits
LEFT JOIN (
    SELECT x.job_name, max(i.heartbeat_at) AS at
    FROM runner.instances i CROSS JOIN LATERAL unnest(i.jobs) AS x(job_name)
    GROUP BY x.job_name
) defined ON defined.job_name = job.job_name
CROSS JOIN LATERAL (SELECT greatest(job.synced_at, job.in_code_at, defined.at) AS at) seen
WHERE job.retired_at IS NULL
  AND seen.at + limits.after < now()
  AND EXISTS (SELECT 1 FROM runner.instances i
              WHERE i.stopped_at IS NULL AND i.heartbeat_at > now() - interval '15 seconds')
  AND NOT EXISTS (SELECT 1 FROM runner.instances i
                  WHERE i.stopped_at IS NULL AND i.heartbeat_at > now() - interval '15 seconds'
                    AND i.jobs @> ARRAY[job.job_name])

UNION ALL
-- misfire_tier: missed slots a tier that alerts sent to a backfill plan not finished yet, or
-- held for approval and not decided yet (revision 0012_tiers)
SELECT 'misfire_tier',
       d.job_name,
       job.owner,
       min(d.run_id),
       CASE WHEN d.backfill_id IS NOT NULL
            THEN format('missed for %s (%s slot(s), %s to %s): misfire tier %L created backfill %s '
                        '(lane %s, %s run(s), %s)', justify_interval(date_trunc('second', max(d.lateness))),
                        count(DISTINCT d.schedule_slot), min(d.schedule_slot), max(d.schedule_slot),
                        d.tier, d.backfill_id, b.lane, count(*), b.status)
            ELSE format('missed for %s (%s slot(s), %s to %s): misfire tier %L holds %s run(s) awaiting '
                        'approval: runner approve %s --from ... --to ... --reason ... (or runner skip)',
                        justify_interval(date_trunc('second', max(d.lateness))),
                        count(DISTINCT d.schedule_slot), min(d.schedule_slot), max(d.schedule_slot),
                        d.tier, count(*), d.job_name)
       END,
       min(d.decided_at)
FROM runner.misfire_decisions d
JOIN runner.job_runs r ON r.id = d.run_id
LEFT JOIN runner.backfills b ON b.id = d.backfill_id
LEFT JOIN job ON job.job_name = d.job_name
WHERE d.alert
  AND ((d.backfill_id IS NOT NULL AND b.status IN ('planned', 'running', 'paused'))
       OR (d.backfill_id IS NULL AND r.status = 'awaiting_approval'))
GROUP BY d.job_name, job.owner, d.tier, d.backfill_id, b.lane, b.status

UNION ALL
-- bad_setting: a setting set to what this view cannot use; its branch uses the default
-- (revision 0023_settings)
SELECT 'bad_setting',
       NULL::text,
       NULL::text,
       NULL::bigint,
       format('setting %s is %L, not an interval above zero and at most 100 years such as ''6 hours'' '
              'or ''1 day 12 hours'': job_not_in_code uses 24 hours until it is fixed (ALTER DATABASE '
              '... SET %s = ''6 hours'', or RESET)',
              s.name, CASE WHEN length(s.raw) > 200 THEN left(s.raw, 200) || '...' ELSE s.raw END, s.name),
       now()
FROM (SELECT 'runner.job_not_in_code_after'::text AS name,
             current_setting('runner.job_not_in_code_after', true) AS raw) s
WHERE nullif(btrim(s.raw), '') IS NOT NULL
  AND runner.interval_setting_v1(s.name) IS NULL

UNION ALL
-- definition_conflict: live runners running two or more definitions of one job's schedule
-- (revision 0026_history: runner.instances.definitions, written at registration)
SELECT 'definition_conflict',
       d.job_name,
       job.owner,
       NULL::bigint,
       format('job %s runs %s definitions on live runners: %s; the schedule history holds %s. '
              'Finish the rollout (stop the runners of the old code) or roll it back',
              quote_literal(d.job_name), count(DISTINCT d.fingerprint),
              string_agg(d.fingerprint || ' (' || coalesce(d.schedule, '?') || ') on ' || d.runners, '; '
                         ORDER BY d.fingerprint),
              coalesce((SELECT s.fingerprint || ' (' || runner.schedule_label_v1(
                                   s.schedule_kind, s.cron, s.every_interval, s.timezone, s.partitions,
                                   s.dynamic_partitions) || ')'
                        FROM runner.job_schedules s WHERE s.job_name = d.job_name
                        ORDER BY s.valid_from DESC LIMIT 1), 'nothing')),
       max(d.first_started)
FROM (
    SELECT x.key AS job_name, x.value ->> 'fingerprint' AS fingerprint,
           min(x.value ->> 'schedule') AS schedule,
           string_agg(i.host || ' pid ' || i.pid, ', ' ORDER BY i.host, i.pid) AS runners,
           min(i.started_at) AS first_started
    FROM runner.instances i
    CROSS JOIN LATERAL jsonb_each(CASE WHEN jsonb_typeof(i.definitions) = 'object'
                                       THEN i.definitions ELSE '{}'::jsonb END) AS x(key, value)
    WHERE i.stopped_at IS NULL AND i.heartbeat_at > now() - interval '15 seconds'
      AND i.backend_pid IN (SELECT runner.runner_sessions_v1())
      AND jsonb_typeof(x.value) = 'object'
    GROUP BY x.key, x.value ->> 'fingerprint'
) d
LEFT JOIN job ON job.job_name = d.job_name
GROUP BY d.job_name, job.owner
HAVING count(DISTINCT d.fingerprint) > 1

;
