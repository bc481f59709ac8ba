"""Settings that cannot break a view: runner.interval_setting_v1 reads a custom setting as an
interval, NULL when it does not parse or is out of range, and runner.alerts uses it for
runner.job_not_in_code_after (24 hours in its place) and reports the bad value (kind
bad_setting) where `'banana'::interval` failed the whole view. Expand only: the view keeps
its columns, gains rows of a new kind.

Revision ID: 0023_settings
Revises: 0022_probes
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0023_settings"
down_revision = "0022_probes"
branch_labels = None
depends_on = None

# runner.alerts as this revision ships it: a frozen copy (0024_sessions changed the live file)
UPGRADE = ["functions/interval_setting_v1.sql", "revisions/0023_settings.alerts.sql"]
# runner.alerts as 0016_health shipped it (frozen copy), then the function goes
DOWNGRADE = ["revisions/0016_health.alerts.sql", "revisions/0023_settings.down.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
