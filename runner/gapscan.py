"""The gap-scan duty: keep ``runner.missing_slots`` cheap.

The view expands each job's expected slots only above its watermark, below which every
expected slot is known to have a run row (sql/functions/advance_watermarks_v1.sql). A
runner moves the watermarks forward every ``interval`` seconds in a thread of its own, on a
connection of its own, so the first advance over a large ledger (seconds) never holds up the
loop. Several runners may do it at once: the function skips watermark rows another holds.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from runner.sqlfiles import queries

log = logging.getLogger("runner.gapscan")
Q = queries("gaps")


def run_once(conn: psycopg.Connection[Any]) -> int:
    """Advance the watermarks once; returns how many moved."""
    row = conn.execute(Q["advance_watermarks"]).fetchone()
    return int(row[0]) if row and row[0] is not None else 0


def one_pass(conn: psycopg.Connection[Any]) -> None:
    """The duty's pass beside the loop (``duties.on_own_connection``, every
    ``watermark_interval``); a failure is retried next time (the view stays correct without
    it, only slower)."""
    log.debug("gap-scan watermarks advanced for %d job(s)", run_once(conn))
