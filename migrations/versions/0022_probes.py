"""Cheaper bounded advance: runner.advance_watermarks_v2 probes the business key's index alone
(SELECT 1, an index-only scan: fetching the run's id read a heap page per probe, 2 ms each on
a cold cache), shares max_probes by water-filling over the jobs still behind (the least needy
take what they need, the rest share what is left; jobs beyond the budget wait their turn)
instead of evenly over every job, and counts a cron's density from its fields.

Revision ID: 0022_probes
Revises: 0021_prune
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0022_probes"
down_revision = "0021_prune"
branch_labels = None
depends_on = None

UPGRADE = ["functions/advance_watermarks_v2.sql"]
DOWNGRADE = ["revisions/0020_bounded.advance_watermarks_v2.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
