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

# the gap scan and the watermark advance learn the recorded fan-outs (CREATE OR REPLACE)
UPGRADE = [
    "revisions/0006_edges.sql",
    # the view and the watermark advance as this revision shipped them (0009 replaces them)
    "revisions/0006_edges.gapscan.sql",
    # the one way to start an attempt (claim_due_runs, claim_plan_runs, take_over_orphans)
    "functions/start_attempts_v1.sql",
    # re-applied (CREATE OR REPLACE): cron_spec_v1 refuses day-of-week '7/n' as Python does
    "functions/cron_slots_v1.sql",
]
# the 0003 versions of the view and function come back, then the tables they no longer read go
# (cron_spec_v1 keeps refusing '7/n': that refusal is harmless to revision 0005)
DOWNGRADE = ["revisions/0003_time.gapscan.sql", "revisions/0006_edges.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
