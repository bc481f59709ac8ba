"""Why an attempt failed: its redacted, bounded traceback and the handler's last heartbeat
(sql/schema/0008_watch.sql; issue 30, point 4). Expand only.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0008_watch
Revises: 0006_websessions
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0008_watch"
down_revision = "0007_identity"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0008_watch.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0008_watch.down.sql"])
