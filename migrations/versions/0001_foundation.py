"""The ledger's foundation: jobs, their schedule history, runs, attempts, instances.

Revision ID: 0001_foundation
Revises:
Create Date: 2026-11-29
"""

from alembic import op

from runner.sqlfiles import read_sql

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(read_sql("revisions/0001_foundation.sql"))
    op.execute(read_sql("functions/lock_key_v1.sql"))


def downgrade() -> None:
    op.execute(read_sql("revisions/0001_foundation.down.sql"))
