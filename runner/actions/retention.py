"""The retention duty and ``runner prune``: old runs leave the ledger in bounded batches.

What may go is decided in the database, by ``runner.prune_v1`` (sql/functions/prune_v1.sql),
from the retention policy each job's code stored in ``runner.jobs.options`` (the job's
``retention=``, else the runner's ``--retention-default``; neither: never pruned): runs that
account for their slot, below the gap scan's trusted watermark, older than their period.
Attempts and effects go with their run; ``runner.requests`` is never pruned. The function runs
as the schema owner, so neither the worker nor the operator role holds DELETE on the ledger,
and the caller chooses nothing but the batch size.

The duty also deletes ``runner.instances`` rows (one per ``runner start``) whose last heartbeat
is older than ``runner.instance_retention`` (7 days unless set; never a row that may be live),
by ``runner.prune_instances_v1`` (sql/functions/prune_instances_v1.sql), in the same
transaction and under the same lock. Before deleting, it records in ``runner.jobs.in_code_at``
when each job was last in the code of those runners, so the ``job_not_in_code`` alert answers
the same with the rows gone, and its cost follows the instances kept, not every start ever.

The duty runs in a thread of its own with a connection of its own, like the gap scan
(runner/worker/gapscan.py), off the loop's hot path: every ``interval`` seconds one pass of at most
``batch`` runs, in one short transaction. One runner at a time across the fleet does it: the
function takes a transaction-level advisory lock (namespace, runner.duty_lock_key_v1('prune'))
and returns at once when another caller holds it. Each pass is its own error boundary: a
failure is logged and the next pass tries again.

``prune`` is the CLI's side: each pass first waits for the fleet's lock (a runner's pass
holds it briefly), so that "nothing pruned" means nothing was left, never that a runner was
pruning at that moment; passes until nothing is left (or ``limit``): until a pass takes fewer
than its batch and every job's sweep (runner.prune_v1 reads at most the batch plus 1,000 of a
job's runs per pass, from a cursor) reached the top of its range; optionally writing
every pruned run (with its attempts and effects, as JSON) to an archive table or file in the
same transaction as the deletion, before it commits: nothing goes unarchived. A file's lines
are flushed and fsync'ed before the commit (else a crash just after it could lose archived
lines the deletion no longer has); a write that fails rolls the pass back (``ArchiveError``).
An archive table is named by plain lowercase SQL names only, never in the runner's schema or
a system one (``check_archive_table``): a name that needs quoting is refused, not quoted.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

import psycopg
from psycopg import sql

from runner.sqlfiles import queries
from runner.store import ledger

log = logging.getLogger("runner.retention")
Q = queries("retention")

MAX_BATCH = 10_000  # runner.prune_v1 caps a pass at this many runs
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")  # an unquoted SQL name PostgreSQL keeps as is
_RESERVED_SCHEMAS = ("runner", "information_schema")


class ArchiveError(Exception):
    """Writing the archive file failed: the pass it was in was rolled back (nothing of it was
    deleted); ``pruned`` runs of earlier passes were archived and pruned."""

    def __init__(self, message: str, pruned: int) -> None:
        super().__init__(message)
        self.pruned = pruned


def run_once(conn: psycopg.Connection[Any], batch: int, namespace: int,
             now: datetime | None = None) -> tuple[int, int]:
    """One pass of the duty (its own transaction): runs by the policy, then instance rows
    that stopped heartbeating long ago (``runner.prune_instances_v1``, under the same lock);
    returns how many of each went."""
    with conn.transaction():
        row = conn.execute(Q["prune_count"], {"batch": batch, "now": now,
                                              "namespace": namespace}).fetchone()
        instances = conn.execute(Q["prune_instances"], {"namespace": namespace}).fetchone()
    return (int(row[0]) if row and row[0] is not None else 0,
            int(instances[0]) if instances and instances[0] is not None else 0)


def pass_of(namespace: int, batch: int) -> Callable[[psycopg.Connection[Any]], None]:
    """The duty's pass beside the loop (``duties.on_own_connection``): ``run_once``, logged."""
    def one_pass(conn: psycopg.Connection[Any]) -> None:
        runs, instances = run_once(conn, batch, namespace)
        if runs:
            log.info("retention: pruned %d run(s)", runs)
        if instances:
            log.info("retention: pruned %d instance row(s) that stopped heartbeating long ago", instances)
    return one_pass


@dataclass
class PruneReport:
    runs: int = 0
    attempts: int = 0
    effects: int = 0
    by_job: dict[str, dict[str, int]] = field(default_factory=dict)  # job -> status -> runs
    passes: int = 0

    def add(self, row: dict[str, Any]) -> None:
        self.runs += 1
        self.attempts += len(row["attempts"])
        self.effects += len(row["effects"])
        statuses = self.by_job.setdefault(row["job_name"], {})
        statuses[row["status"]] = statuses.get(row["status"], 0) + 1


def check_archive_table(name: str) -> tuple[str, ...]:
    """The parts of an archive table's name (``table`` or ``schema.table``), each a plain
    lowercase SQL name of at most 63 characters (what psql finds unquoted), not in the
    runner's schema (the ledger's; dropped with it) nor a system one; else ValueError."""
    parts = tuple(name.split("."))
    if not 1 <= len(parts) <= 2 or not all(_PLAIN_NAME.fullmatch(p) for p in parts):
        raise ValueError(f"--archive-table must be TABLE or SCHEMA.TABLE, each a plain lowercase SQL name "
                         f"(a-z, 0-9, _; at most 63 characters), got {name!r}")
    if len(parts) == 2 and (parts[0] in _RESERVED_SCHEMAS or parts[0].startswith("pg_")):
        raise ValueError(f"--archive-table: not in the schema {parts[0]!r} (the runner's own or a system "
                         f"one), got {name!r}")
    return parts


def _archive_table(conn: psycopg.Connection[Any], name: str, rows: list[dict[str, Any]]) -> None:
    """COPY the pruned rows into ``name`` (``schema.table`` or ``table``), created if missing."""
    ident = sql.Identifier(*check_archive_table(name))
    conn.execute(sql.SQL(Q["archive_table_create"]).format(table=ident))
    with conn.cursor().copy(sql.SQL(Q["archive_table_copy"]).format(table=ident)) as copy:
        for r in rows:
            copy.write_row((r["job_name"], r["run_id"], r["schedule_slot"], r["status"],
                            json.dumps(r["run"]), json.dumps(r["attempts"]), json.dumps(r["effects"])))


def prune(conn: psycopg.Connection[Any], namespace: int, *, batch: int = 1000,
          dry_run: bool = False, limit: int | None = None, archive_table: str | None = None,
          archive_file: IO[str] | None = None, now: datetime | None = None) -> PruneReport:
    """Prune until nothing is left (or ``limit`` runs), one transaction per pass; with
    ``dry_run`` one look of up to ``limit`` (else ``batch``) runs and nothing deleted. The
    archive (a table, or a file of JSON lines) is written in the pass's transaction, before it
    commits."""
    report = PruneReport()
    batch = max(1, min(batch, MAX_BATCH))
    sweeps = _sweeps(conn)
    while True:
        size = batch if limit is None else min(batch, limit - report.runs)
        if dry_run:
            size = min(limit or batch, MAX_BATCH)
        if size <= 0:
            break
        with conn.transaction():
            # wait for a runner's pass to end, rather than read "nothing left" off its lock
            conn.execute(Q["prune_lock"], {"namespace": namespace})
            rows = ledger.dict_rows(conn, Q["prune"], {"batch": size, "now": now, "dry_run": dry_run,
                                                        "namespace": namespace})
            if rows and not dry_run:
                if archive_table is not None:
                    _archive_table(conn, archive_table, rows)
                if archive_file is not None:
                    _archive_lines(archive_file, rows, report.runs)
            before, sweeps = sweeps, _sweeps(conn)
        report.passes += 1
        for r in rows:
            report.add(r)
        # a short pass may only mean that its sweep step read kept runs: go on while a pass
        # moved a sweep that has not reached the top yet (runner.prune_v1, revision 0021)
        if dry_run or (len(rows) < size and (sweeps is None or sweeps == before)):
            break
    return report


def _archive_lines(out: IO[str], rows: list[dict[str, Any]], pruned: int) -> None:
    """Append the pass's rows to the archive file and put them on disk (flush, fsync) before
    the caller commits the deletion; a failure raises ArchiveError (the pass rolls back)."""
    try:
        for r in rows:
            out.write(json.dumps(r, default=str, sort_keys=True) + "\n")
        out.flush()
        try:
            os.fsync(out.fileno())
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):  # a pipe or a terminal: nothing to sync
                raise
    except OSError as exc:
        raise ArchiveError(f"--archive-file: writing failed ({exc.strerror or exc}); the pass it was in "
                           f"deleted nothing ({pruned} run(s) of earlier passes were archived and pruned)",
                           pruned) from None


def _sweeps(conn: psycopg.Connection[Any]) -> str | None:
    """Where the jobs' retention sweeps stand (None: each at the top, or not started)."""
    row = conn.execute(Q["prune_sweeps"]).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def open_archive(path: str) -> IO[str]:
    """The archive file, appended to (a pass's rows are written before its deletion commits);
    ArchiveError when it cannot be opened for writing. It holds whole runs (their errors,
    their effects' payloads): a file it creates is mode 0600 (whatever the umask), and a
    symbolic link at ``path`` is never followed (``O_NOFOLLOW``: refused, so a link planted
    there cannot send the runs into another file, or append to one the caller may write)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        why = ("it is a symbolic link (not followed)" if exc.errno == errno.ELOOP
               else exc.strerror or str(exc))
        raise ArchiveError(f"--archive-file {path!r} cannot be written: {why}; nothing pruned", 0) from None
    return os.fdopen(fd, "a", encoding="utf-8")
