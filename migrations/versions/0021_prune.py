"""Retention, bounded: runner.prune_v1 sweeps each job's runs from a cursor
(gap_watermarks.prune_cursor) a bounded number of rows per pass, so a pass no longer re-reads
every run it keeps; it deletes the slot fan-outs of pruned slots; and, when a job's policy sets
failed_seconds, dead runs and failed runs with no retry pending go after that period.

Revision ID: 0021_prune
Revises: 0020_bounded
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0021_prune"
down_revision = "0020_bounded"
branch_labels = None
depends_on = None

UPGRADE = ["revisions/0021_prune.sql", "functions/prune_v1.sql"]
DOWNGRADE = ["revisions/0021_prune.down.sql", "revisions/0009_retention.prune.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
