"""The Jobs page in one pass of the gap scan (runner.job_health_v1, the view's new body, with
each job's missing count; runner.missing_slots_v1, same signature and rows, reads a job's
holes by its key and retired spans only for retired jobs), and runner.instances pruned by the retention duty
(runner.prune_instances_v1) with what job_not_in_code needs kept in runner.jobs.in_code_at.

Revision ID: 0016_health
Revises: 0015_scale
Create Date: 2026-12-02
"""

from alembic import op

from runner.sqlfiles import apply_files

revision = "0016_health"
down_revision = "0015_scale"
branch_labels = None
depends_on = None

# runner.alerts as this revision ships it: a frozen copy of sql/views/alerts.sql (0023_settings
# changed the live file)
UPGRADE = ["revisions/0016_health.sql", "revisions/0016_health.missing_slots.sql", "views/job_health.sql",
           "revisions/0016_health.prune_instances.sql", "revisions/0016_health.alerts.sql"]
# runner.alerts as 0012_tiers shipped it, then the column and functions go, then
# runner.job_health as 0010_web shipped it and the gap scan as 0014_webperf did (frozen copies)
DOWNGRADE = ["revisions/0012_tiers.alerts.sql", "revisions/0016_health.down.sql",
             "revisions/0010_web.job_health.sql", "revisions/0014_webperf.missing_slots.sql"]


def upgrade() -> None:
    apply_files(op.execute, UPGRADE)


def downgrade() -> None:
    apply_files(op.execute, DOWNGRADE)
