"""Verification kinds and backfill metrics: runner.verify_query_v1 (a job's verification SQL,
as the condition role), pauses counted by cause on runner.backfills, the view
runner.backfill_plans.

Revision ID: 0013_verify
Revises: 0011_lanes
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0013_verify"
down_revision = "0011_lanes"
branch_labels = None
depends_on = None

UPGRADE = ["revisions/0013_verify.sql", "functions/verify_query_v1.sql", "views/backfill_plans.sql"]
DOWNGRADE = ["revisions/0013_verify.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
