"""A backfill plan's pause condition is evaluated at most once every ``pause_every`` seconds
(`runner backfill --pause-every`; sql/schema/0012_pauseevery.sql), 5 before this step for
every plan. Expand only: a new column with a default, which no runner of 0011_resume names.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0012_pauseevery
Revises: 0011_resume
Create Date: 2026-12-04
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0012_pauseevery"
down_revision = "0011_resume"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0012_pauseevery.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0012_pauseevery.down.sql"])
