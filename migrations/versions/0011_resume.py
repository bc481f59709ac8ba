"""A backfill plan remembers whether the operator asked its re-queued runs to resume from
their last checkpoints (`runner backfill --resume`, issue 33; sql/schema/0011_resume.sql).
Expand only: a new column with a default, which no runner of 0010_runs names.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0011_resume
Revises: 0010_runs
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0011_resume"
down_revision = "0010_runs"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0011_resume.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0011_resume.down.sql"])
