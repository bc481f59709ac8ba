"""Schedule history across code versions, and effect keys that outlive retention (issue 26,
defects 2 and 5): history rows stamped (fingerprint, recorded_at, explained_by) by a
trigger, runner.sync_schedule_v1 as the runners' one writer of the history, each runner's
definitions in runner.instances, runner.effect_keys kept by runner.prune_v1, the alert
definition_conflict and the audit classes effect_key_twice and history_unexplained.

Temporary old-style revision (to be converted to the live-object layout on merge).

Revision ID: 0026_history
Revises: 0025_scan
Create Date: 2026-12-03
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0026_history"
down_revision = "0025_scan"
branch_labels = None
depends_on = None

UPGRADE = [
    "functions/schedule_fingerprint_v1.sql",
    "functions/schedule_label_v1.sql",
    "revisions/0026_history.sql",
    "functions/sync_schedule_v1.sql",
    "functions/prune_v1.sql",
    "functions/check_v1.sql",
    "views/violations.sql",
    "views/alerts.sql",
]
DOWNGRADE: list[str] = []


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
