"""Wider instants: runner.finish_attempts_v1 reaches each outcome's run and attempt by their
keys whatever the tables' statistics (planner settings on the function; its header says why).

Revision ID: 0019_wide
Revises: 0018_recovery
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0019_wide"
down_revision = "0018_recovery"
branch_labels = None
depends_on = None

UPGRADE = ["revisions/0019_wide.finish_attempts.sql"]  # as shipped (0024 replaces it)
# the function as 0007_security shipped it comes back
DOWNGRADE = ["revisions/0007_security.finish_attempts.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
