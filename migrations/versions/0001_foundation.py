"""The ledger's foundation: jobs, their schedule history, runs, attempts, instances.

Revision ID: 0001_foundation
Revises:
Create Date: 2026-11-29
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["revisions/0001_foundation.sql", "functions/lock_key_v1.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["revisions/0001_foundation.down.sql"])
