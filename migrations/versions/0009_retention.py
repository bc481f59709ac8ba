"""Retention: retiring jobs, pruning the ledger, the duties' lock keys.

Revision ID: 0009_retention
Revises: 0008_audit
Create Date: 2026-12-01
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0009_retention"
down_revision = "0008_audit"
branch_labels = None
depends_on = None

# tables first, then the functions and views that read them (each replaced from its live file)
UPGRADE = [
    "revisions/0009_retention.sql",
    "functions/duty_lock_key_v1.sql",
    "revisions/0009_retention.missing_slots.sql",
    "revisions/0009_retention.advance_watermarks.sql",
    "revisions/0025_frozen.check_v1.sql",  # (frozen until the layout lands: 0026_history)
    "revisions/0009_retention.job_health.sql",
    "revisions/0009_retention.alerts.sql",
    "functions/retire_job_v1.sql",
    "revisions/0009_retention.prune.sql",
]
# the new objects go, then the views and functions of 0004, 0006, 0007 (alerts) and 0008 come
# back as shipped
DOWNGRADE = [
    "revisions/0009_retention.down.sql",
    "revisions/0004_operators.views.sql",
    "revisions/0007_security.alerts.sql",
    "revisions/0006_edges.gapscan.sql",
    "revisions/0008_audit.check.sql",
]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
