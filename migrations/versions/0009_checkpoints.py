"""Fenced checkpoints (issue 33): a run's last committed checkpoint (its state, when, by which
fence, its size and summary, and how many the run has taken), the count an attempt started
from, and the attempt status ``handed_off`` (sql/schema/0009_checkpoints.sql). Expand only:
new nullable or defaulted columns no runner of 0005_plans names, and a status check that
admits one more value.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0009_checkpoints
Revises: 0005_plans
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0009_checkpoints"
down_revision = "0008_watch"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0009_checkpoints.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0009_checkpoints.down.sql"])
