"""A ledger of years: fixed autovacuum thresholds for runner.job_runs and runner.attempts, and
a partial index of failed attempts by finish time (README "Upgrading while running": on a
large ledger, build it CONCURRENTLY first).

Revision ID: 0015_scale
Revises: 0013_verify
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0015_scale"
down_revision = "0013_verify"
branch_labels = None
depends_on = None

UPGRADE = ["revisions/0015_scale.sql"]
DOWNGRADE = ["revisions/0015_scale.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
