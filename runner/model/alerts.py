"""The alert kinds of ``runner.alerts``, one registry.

``runner.alerts`` (sql/views/alerts.sql) is the union of one view per kind,
``runner.alert_<kind>`` (sql/views/alert_<kind>.sql), each with the same six columns (kind,
job_name, owner, run_id, detail, since) and the jobs as ``runner.alert_jobs`` gives them. A
new kind is: its view file (listed in sql/objects.txt before alerts.sql), one entry here, and
one ``UNION ALL`` line in alerts.sql; tests/test_alert_kinds.py keeps the three equal
(docs/contributing.md has the checklist).
"""

from __future__ import annotations

KINDS: tuple[str, ...] = (
    "dead",              # every dead run, until an operator reruns, skips or cancels it
    "abandoned",         # attempts abandoned (their owner died) in the last 24 hours
    "slow",              # a run over 2 x the p95 of the job's last 100 successes
    "stale",             # no success for longer than the job's stale_after
    "late",              # the latest slot past its deadline (slot + grace) is not done
    "backfill_paused",   # a backfill plan paused, by itself or by an operator
    "effect_unknown",    # a side effect whose delivery is unknown
    "effect_duplicate",  # a side effect sent more than once
    "lock_squatter",     # a session that is not a runner's holds run keys
    "job_not_in_code",   # a job no live runner defines, for longer than the setting
    "misfire_tier",      # missed slots a tier sent to a plan or held, not settled yet
    "definition_conflict",  # live runners run two definitions of one job's schedule
    "bad_setting",       # a setting the alerts read cannot be used
    "copied_ledger",     # a restored copy of a ledger, not adopted yet: its runners hold plans
    "no_runner",         # no live runner for longer than the setting while jobs are due
)


def view_of(kind: str) -> str:
    """The view of one kind, e.g. ``runner.alert_dead``."""
    if kind not in KINDS:
        raise ValueError(f"no alert kind {kind!r}; one of {', '.join(KINDS)}")
    return f"runner.alert_{kind}"


def file_of(kind: str) -> str:
    """Its live SQL file, relative to sql/ (sql/objects.txt)."""
    view_of(kind)
    return f"views/alert_{kind}.sql"
