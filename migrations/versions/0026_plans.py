"""Backfill x coverage (issue 26, defects 1, 6, 7 and the audit classes started_before_slot,
plan_completed_not_done, cover_not_covered): temporary old-style revision, to be converted
into live objects on merge.

Revision ID: 0026_plans
Revises: 0025_scan
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0026_plans"
down_revision = "0025_scan"
branch_labels = None
depends_on = None

UPGRADE = [
    "revisions/0026_plans.sql",
    "functions/create_backfill_v1.sql",
    "functions/backfill_actions_v1.sql",
    "functions/start_attempts_v1.sql",
    "functions/plan_range_v1.sql",
    "functions/check_v1.sql",
    "views/missing_slots.sql",
]
DOWNGRADE: list[str] = []


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
