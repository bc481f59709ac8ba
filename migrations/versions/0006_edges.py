"""Edges: one way to start an attempt, expected partitions recorded per slot.

Revision ID: 0006_edges
Revises: 0005_shares
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0006_edges"
down_revision = "0005_shares"
branch_labels = None
depends_on = None

UPGRADE = [
    "revisions/0006_edges.sql",
    # re-applied (CREATE OR REPLACE): cron_spec_v1 refuses day-of-week '7/n' as Python does
    "functions/cron_slots_v1.sql",
]
DOWNGRADE = ["revisions/0006_edges.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
