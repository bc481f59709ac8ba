"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from alembic import op

from runner.sqlfiles import read_sql

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}


def upgrade() -> None:
    op.execute(read_sql("revisions/${up_revision}.sql"))


def downgrade() -> None:
    op.execute(read_sql("revisions/${up_revision}.down.sql"))
