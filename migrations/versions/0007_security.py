"""Security: audited action functions, least-privilege roles, the condition role.

Revision ID: 0007_security
Revises: 0006_edges
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0007_security"
down_revision = "0006_edges"
branch_labels = None
depends_on = None

UPGRADE = [
    "revisions/0007_security.sql",
    # the worker's outcomes, fence-checked, as the owner
    "revisions/0007_security.finish_attempts.sql",  # finish_attempts_v1 as shipped (0019 replaces it)
    "revisions/0007_security.record_replay_plan.sql",  # as shipped (0018 replaces it)
    # every operator action, audited, as the owner
    "revisions/0007_security.rerun.sql",  # rerun_v1 as shipped (0011 replaces it)
    "functions/set_job_paused_v1.sql",
    "revisions/0007_security.decide_runs.sql",  # decide_runs_v1 as shipped (0011 replaces it)
    "functions/create_backfill_v1.sql",
    "functions/backfill_actions_v1.sql",
    # sessions holding runner lock keys that are not registered runners (runner/takeover.py)
    "revisions/0007_security.squatters.sql",
    "revisions/0007_security.runner_sessions.sql",  # runner_sessions_v1 as shipped (0024 replaces it)
    "revisions/0007_security.alerts.sql",
    # the pause condition, run as the condition role (runner/conditions.py)
    "functions/pause_condition_v1.sql",
    "revisions/0007_security.conditions.sql",
]
DOWNGRADE = ["revisions/0007_security.conditions.down.sql", "revisions/0007_security.squatters.down.sql",
             "revisions/0007_security.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
