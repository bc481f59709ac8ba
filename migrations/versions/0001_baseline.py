"""The runner schema's tables, indexes, constraints and built-in rows (sql/schema/0001_baseline.sql),
as the history before it left them at 0025_scan: a ledger at that revision is stamped onto this
one and not changed (runner/migrate.py, STAMPED). Views, functions and triggers are live objects
(sql/objects.txt), applied by migrations/env.py after the schema steps.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0001_baseline
Revises:
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0001_baseline"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0001_baseline.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0001_baseline.down.sql"])
