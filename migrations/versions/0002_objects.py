"""runner.sql_objects: the checksums of the live SQL objects as they were applied
(sql/schema/0002_objects.sql). Expand only: a new table no runner of 0025_scan names.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0002_objects
Revises: 0001_baseline
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0002_objects"
down_revision = "0001_baseline"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0002_objects.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0002_objects.down.sql"])
