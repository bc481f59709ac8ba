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
--              detail names each fingerprint with its schedule and the runners that run it, and
--              which one the schedule history holds (runner/history.py)
--   bad_setting       a setting this view reads is set (ALTER DATABASE/ROLE ... SET, SET) to
--              something it cannot use: runner.job_not_in_code_after (or, since revision
--              0008_watch, runner.no_runner_after: no_runner uses 60 seconds) not an interval above
--              zero and at most 100 years in the forms runner.interval_setting_v1 reads
--              ('6 hours', '1 day 12 hours', '06:30'). The branch that reads it
--              uses its default instead (24 hours), so a typo never makes this view fail;
--              the detail names the setting and its value (quoted, cut at 200 characters)
--              (revision 0023_settings)
--   copied_ledger     this ledger is a copy (pg_restore or CREATE DATABASE ... TEMPLATE into
--              another database, a restore into another cluster: runner.ledger_copy_v1, revision
--              0007_identity) that no operator adopted: its runners hold the source's backfill
--              plans, catch-up, retries and takeovers until `runner db adopt --reason R`
--   no_runner         no live runner process (not stopped, heartbeat within 15 s) for longer
--              than runner.no_runner_after (60 seconds unless set) since the newest runner
--              heartbeat, while a job that is neither paused nor retired has a slot since
--              then (a cron job: within the last day) or runs are queued and due: one row
--              for the ledger, job_name NULL
--              (revision 0008_watch)
--
-- Retired jobs (runner retire) raise no stale or late alerts: their slots after the
-- retirement are not expected; their dead runs still alert.
--
-- Paused jobs get no stale or late alerts (they are silent on purpose: runner.requests says
-- who paused them and why); their dead, abandoned and slow runs still alert.
--
-- Each kind is a view of its own, runner.alert_<kind> (sql/views/alert_<kind>.sql), with these
-- six columns; runner/alerts.py lists the kinds, and a new kind is one file there, one entry
-- there and one line here (docs/contributing.md).
CREATE OR REPLACE VIEW runner.alerts AS
SELECT * FROM runner.alert_dead
UNION ALL
SELECT * FROM runner.alert_abandoned
UNION ALL
SELECT * FROM runner.alert_slow
UNION ALL
SELECT * FROM runner.alert_stale
UNION ALL
SELECT * FROM runner.alert_late
UNION ALL
SELECT * FROM runner.alert_backfill_paused
UNION ALL
SELECT * FROM runner.alert_effect_unknown
UNION ALL
SELECT * FROM runner.alert_effect_duplicate
UNION ALL
SELECT * FROM runner.alert_lock_squatter
UNION ALL
SELECT * FROM runner.alert_job_not_in_code
UNION ALL
SELECT * FROM runner.alert_misfire_tier
UNION ALL
SELECT * FROM runner.alert_definition_conflict
UNION ALL
SELECT * FROM runner.alert_bad_setting
UNION ALL
SELECT * FROM runner.alert_copied_ledger
UNION ALL
SELECT * FROM runner.alert_no_runner;
