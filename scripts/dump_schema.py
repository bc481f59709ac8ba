"""Regenerate sql/schema.txt, the committed snapshot of the migrated runner schema.

    python scripts/dump_schema.py postgresql://postgres@127.0.0.1/scratch_db

The database is migrated to head first (a scratch database: it must not hold other data
you care about). tests/test_migrations.py compares a fresh migration with this file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import psycopg

from runner.store import migrate


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    url = sys.argv[1]
    migrate.upgrade(url)
    with psycopg.connect(url) as conn:
        text = migrate.describe_schema(conn)
    target = Path(__file__).resolve().parent.parent / "sql" / "schema.txt"
    target.write_text(text)
    print(f"wrote {target} ({len(text.splitlines())} lines)")


if __name__ == "__main__":
    main()
