"""An index for the gap scan: the runs coalesced into a cover, found from the cover
(sql/schema/0005_plans.sql; issue 26, defect 6 and the audit class cover_not_covered).
Expand only.

Never edited once merged (tests/test_migrations.py holds the checksum of every schema step).

Revision ID: 0005_plans
Revises: 0004_expected
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0005_plans"
down_revision = "0004_expected"
branch_labels = None
depends_on = None


def upgrade() -> None:
    apply_files(op.execute, ["schema/0005_plans.sql"])


def downgrade() -> None:
    apply_files(op.execute, ["schema/0005_plans.down.sql"])
