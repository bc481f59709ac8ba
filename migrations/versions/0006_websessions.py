"""The console's ended sessions: logging out of `runner web` is recorded in the ledger, so
every console process sharing it refuses the cookie afterwards (sql/schema/0006_websessions.sql;
issue 28, point 4). Expand only.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0006_websessions
Revises: 0005_plans
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0006_websessions"
down_revision = "0005_plans"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0006_websessions.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0006_websessions.down.sql"])
