"""Operators: requests audit, job health and alerts views, roles.

Revision ID: 0004_operators
Revises: 0003_time
Create Date: 2026-11-29
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0004_operators"
down_revision = "0003_time"
branch_labels = None
depends_on = None

# applied in this order on upgrade; tables first, then functions and views that use them
# job_health as this revision shipped it (0009_web replaces it from sql/views/job_health.sql)
UPGRADE = ["revisions/0004_operators.sql", "revisions/0004_operators.job_health.sql", "views/alerts.sql"]
DOWNGRADE = ["revisions/0004_operators.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
