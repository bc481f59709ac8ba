"""The console's pages bounded by live state: indexes that match job_health and alerts, and
the gap scan reaching one job by its key.

Revision ID: 0014_webperf
Revises: 0012_tiers
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0014_webperf"
down_revision = "0012_tiers"
branch_labels = None
depends_on = None

# the indexes, then the gap scan reaching one job by its key (a frozen copy of the live file)
UPGRADE = ["revisions/0014_webperf.sql", "revisions/0014_webperf.missing_slots.sql"]
# the indexes as 0010_web had them, the gap scan as 0009_retention shipped it
DOWNGRADE = ["revisions/0014_webperf.down.sql", "revisions/0009_retention.missing_slots.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
