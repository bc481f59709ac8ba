"""Runner sessions of another role: runner.instances.login (set by a trigger from the writing
session's login) lets runner.runner_sessions_v1 recognise a peer's lock session where
PostgreSQL hides its backend_start (a viewer of another role), so runners, dashboards and
operators no longer take every runner of another login for a lock squatter; runner.alerts
and runner.prune_instances_v1 use the function instead of the old rule written out. And
runner.finish_attempts_v1: a LockBusy release keeps its run's trigger and is due after its
retry delay. Expand only: a nullable column older runners never name, a trigger, functions
and a view with the same signatures and columns.

Revision ID: 0024_sessions
Revises: 0023_settings
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0024_sessions"
down_revision = "0023_settings"
branch_labels = None
depends_on = None

UPGRADE = ["revisions/0024_sessions.sql", "functions/runner_sessions_v1.sql",
           "functions/prune_instances_v1.sql", "revisions/0025_frozen.alerts.sql",
           "functions/finish_attempts_v1.sql"]  # (alerts: frozen until the layout lands, 0026_history)
# the functions and the view as they were shipped (frozen copies: 0007, 0016, 0023, 0019),
# then the trigger and the column
DOWNGRADE = ["revisions/0007_security.runner_sessions.sql", "revisions/0016_health.prune_instances.sql",
             "revisions/0023_settings.alerts.sql", "revisions/0019_wide.finish_attempts.sql",
             "revisions/0024_sessions.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
