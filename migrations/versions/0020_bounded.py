"""Bounded watermark advance: runner.advance_watermarks_v2(as_of, max_span) moves each job's
gap-scan watermark at most max_span per call and says how many jobs are still behind, so that
catching up an old ledger is a series of short transactions (a statement of minutes holds back
every vacuum); runner.advance_watermarks_v1 becomes v2 with no cap.

Revision ID: 0020_bounded
Revises: 0019_wide
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0020_bounded"
down_revision = "0019_wide"
branch_labels = None
depends_on = None

UPGRADE = ["revisions/0020_bounded.advance_watermarks_v2.sql", "functions/advance_watermarks_v1.sql",
           "revisions/0020_bounded.grants.sql"]
DOWNGRADE = ["revisions/0020_bounded.down.sql", "revisions/0009_retention.advance_watermarks.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
