"""Time: misfire decisions, the gap-scan view, backfills, approvals.

Revision ID: 0003_time
Revises: 0002_faults
Create Date: 2026-11-29
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0003_time"
down_revision = "0002_faults"
branch_labels = None
depends_on = None

# applied in this order on upgrade; tables first, then functions and views that use them
UPGRADE = [
    "revisions/0003_time.sql",
    # the gap scan: slot expansion, the view, the watermark advance
    "functions/cron_slots_v1.sql",
    "functions/every_slots_v1.sql",
    "functions/schedule_slots_v1.sql",
    # the view and the watermark advance as this revision shipped them (later revisions
    # replace them from sql/views and sql/functions)
    "revisions/0003_time.gapscan.sql",
]
DOWNGRADE = ["revisions/0003_time.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
