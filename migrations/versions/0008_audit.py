"""The ledger audit: runner.check_v1() and the runner.violations view.

Revision ID: 0008_audit
Revises: 0007_security
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0008_audit"
down_revision = "0007_security"
branch_labels = None
depends_on = None

# applied in this order: the function, then the view that calls it
UPGRADE = [
    "revisions/0008_audit.sql",
    "revisions/0008_audit.check.sql",  # check_v1 as shipped (0009 replaces it)
    "views/violations.sql",
]
DOWNGRADE = ["revisions/0008_audit.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
