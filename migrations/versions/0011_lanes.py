"""Lanes: the workloads a runner process serves, with per-lane fleet budgets.

Revision ID: 0011_lanes
Revises: 0014_webperf
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0011_lanes"
down_revision = "0014_webperf"
branch_labels = None
depends_on = None

UPGRADE = [
    "revisions/0011_lanes.sql",
    "functions/lane_budget_v1.sql",
    "functions/lane_spend_v1.sql",
    "functions/set_lane_v1.sql",
    # reruns go to the correction lane, approved runs to manual (frozen copies)
    "revisions/0011_lanes.rerun.sql",
    "revisions/0011_lanes.decide_runs.sql",
]
# the functions as 0007_security shipped them come back
DOWNGRADE = [
    "revisions/0011_lanes.down.sql",
    "revisions/0007_security.rerun.sql",
    "revisions/0007_security.decide_runs.sql",
]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
