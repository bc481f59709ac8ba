"""Recovery: a misfire replay's plan is tagged with its lane, correction (runner/lanes.py),
instead of the old tag catch_up (still read as correction for plans made before).

Revision ID: 0018_recovery
Revises: 0016_health
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0018_recovery"
down_revision = "0016_health"
branch_labels = None
depends_on = None

UPGRADE = ["functions/record_replay_plan_v1.sql"]
# runner.record_replay_plan_v1 as 0007_security shipped it (its frozen copy)
DOWNGRADE = ["revisions/0007_security.record_replay_plan.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
