"""The operator console: runner.job_health's lag counts the slots that never started.

Revision ID: 0010_web
Revises: 0009_retention
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0010_web"
down_revision = "0009_retention"
branch_labels = None
depends_on = None

UPGRADE = ["revisions/0010_web.sql", "revisions/0010_web.job_health.sql"]  # a frozen copy
# the view as 0009_retention shipped it (no oldest_missing_slot column: dropped, then created)
DOWNGRADE = ["revisions/0010_web.down.sql", "revisions/0009_retention.job_health.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
