"""Alembic revisions of the runner schema; each applies SQL files from sql/."""
