"""The schedule history knows which definition each row is and who wrote it; each runner
records the definition it runs of each job; confirmed effect keys outlive their runs
(sql/schema/0003_history.sql; issue 26, defects 2 and 5). Expand only: nullable columns that
runners of 0002 never name, one table.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0003_history
Revises: 0002_objects
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0003_history"
down_revision = "0002_objects"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0003_history.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0003_history.down.sql"])
