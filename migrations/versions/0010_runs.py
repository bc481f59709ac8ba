"""Indexes for the console's Runs page: every run in slot order, and the runs needing
attention in slot order (sql/schema/0010_runs.sql; issue 30, point 5). Expand only.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0010_runs
Revises: 0005_plans
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0010_runs"
down_revision = "0009_checkpoints"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0010_runs.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0010_runs.down.sql"])
