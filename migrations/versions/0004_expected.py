"""runner.misfire_ranges: the misfire duty's ranges of late slots and their tier ruling, kept in
the ledger so that a runner restarted midway through a range resumes it with the same ruling
(sql/schema/0004_expected.sql). Expand only: a new table no runner of 0003_history names.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0004_expected
Revises: 0003_history
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0004_expected"
down_revision = "0003_history"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0004_expected.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0004_expected.down.sql"])
