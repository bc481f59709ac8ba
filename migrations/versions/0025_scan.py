"""The gap scan reads an unaccounted run's attempt only when the run is running:
runner.missing_slots_v1 (same signature, same rows) probed runner.attempts for every failed
and dead run it listed, 27 % of its buffers on a 30M-run ledger (scripts/bench/RESULTS.md).

Revision ID: 0025_scan
Revises: 0024_sessions
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0025_scan"
down_revision = "0024_sessions"
branch_labels = None
depends_on = None

UPGRADE = ["views/missing_slots.sql"]
# the gap scan as 0016_health shipped it (frozen copy)
DOWNGRADE = ["revisions/0016_health.missing_slots.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
