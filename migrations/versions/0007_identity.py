"""Where this ledger lives: the cluster's system identifier and the database's oid and name,
recorded once (sql/schema/0007_identity.sql; issue 29, point 6: a restored copy must not act
on its source's plans). Expand only.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0007_identity
Revises: 0006_websessions
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0007_identity"
down_revision = "0006_websessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0007_identity.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0007_identity.down.sql"])
