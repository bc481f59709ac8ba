"""Shares: the jobs each runner process serves (runner.instances.jobs).

Revision ID: 0005_shares
Revises: 0004_operators
Create Date: 2026-11-29
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0005_shares"
down_revision = "0004_operators"
branch_labels = None
depends_on = None

UPGRADE = ["revisions/0005_shares.sql"]
DOWNGRADE = ["revisions/0005_shares.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
