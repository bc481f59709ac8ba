"""Faults: takeover, leases, timeouts, overlap, the effect log.

Revision ID: 0002_faults
Revises: 0001_foundation
Create Date: 2026-11-29
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0002_faults"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None

# applied in this order on upgrade; tables first, then functions and views that use them
UPGRADE = ["revisions/0002_faults.sql", "functions/try_terminate_v1.sql", "views/run_stages.sql"]
DOWNGRADE = ["revisions/0002_faults.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
