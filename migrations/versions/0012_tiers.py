"""Misfire tiers: the record of which tier decided each missed slot, the backfill tier's plan
function, the misfire_tier alert.

Revision ID: 0012_tiers
Revises: 0010_web
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0012_tiers"
down_revision = "0010_web"
branch_labels = None
depends_on = None

# the table first, then the function and the view that read it (frozen copies of
# sql/functions/tier_backfill_v1.sql and sql/views/alerts.sql as this revision ships them)
UPGRADE = [
    "revisions/0012_tiers.sql",
    "revisions/0012_tiers.tier_backfill.sql",
    "revisions/0012_tiers.alerts.sql",
]
# the new objects go, then runner.alerts comes back as 0009_retention shipped it
DOWNGRADE = ["revisions/0012_tiers.down.sql", "revisions/0009_retention.alerts.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
