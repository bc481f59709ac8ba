"""The operator console: runner.job_health's lag counts the slots that never started.

Revision ID: 0009_web
Revises: 0008_audit
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0009_web"
down_revision = "0008_audit"
branch_labels = None
depends_on = None

UPGRADE = ["revisions/0009_web.sql", "views/job_health.sql"]
# the view as 0004_operators shipped it (no oldest_missing_slot column: dropped, then created)
DOWNGRADE = ["revisions/0009_web.down.sql", "revisions/0004_operators.job_health.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
