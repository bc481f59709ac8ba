"""The ``runner`` command (Typer): parse, call, print. No logic of its own.

The operator actions (rerun, pause, resume, approve, skip, retire, unretire, backfill and
backfill pause/resume/cancel, lane set, prune) are the registry's (runner/actions/registry.py): each
command keeps its hand-written Typer declaration (options, help), has its options parsed by
the registry's one parser (times by its one time parser), shows the registry's plan, asks,
and calls the registry's act, i.e. the audited database function; the console
(runner/web/actions.py) serves the same actions. ``_dispatches`` marks those commands
(tests/test_actions.py: the marked commands are exactly the registry's actions).

Exit codes (docs/reference/exit-codes.md is generated from this list and checked against
every exit in this file):

* 0: done; ``runner check``: no violation found
* 1: an error: one line on stderr, nothing written; ``runner check``: violations found
* 2: a usage error: a bad option value, a missing option or argument, an unknown command
  (one line on stderr, nothing written)
* 3: ``runner web`` could not start serving (e.g. its address is in use; the server logged why)
* 130: interrupted (Ctrl-C) before the command finished (``runner start`` and ``runner web``
  stop cleanly on SIGINT or SIGTERM instead, and exit 0)
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, NoReturn

import psycopg
import typer
from psycopg.conninfo import conninfo_to_dict
from rich.console import Console
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from runner.actions import audit, backfill, copies, operate
from runner.actions import registry as actions
from runner.errors import JobDefinitionError, JobRetired
from runner.model.loader import load_app
from runner.printable import printable
from runner.settings import (
    ConfigError,
    DatabaseChoice,
    choose_database,
    has_password,
    lock_namespace,
    redact,
    redact_error,
)
from runner.sqlfiles import queries
from runner.store import ledger, migrate, pooler
from runner.worker import conditions, lanes
from runner.worker.conditions import PROMETHEUS as PROMETHEUS_CONDITION

app = typer.Typer(
    name="runner",
    help="A PostgreSQL-native scheduled-job runner that proves every slot ran once.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="The runner schema: migrate, show, print SQL.", no_args_is_help=True)
app.add_typer(db_app, name="db")
embedded_app = typer.Typer(help="The embedded PostgreSQL under ./.runner/ (used when no database is "
                                  "configured): whether it runs, stop it, delete it.", no_args_is_help=True)
app.add_typer(embedded_app, name="embedded")

Q = queries("cli")

AppOpt = Annotated[
    str | None,
    typer.Option("--app", envvar="RUNNER_APP", help="module:attr or path/to/file.py:attr"),
]
DbOpt = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar="RUNNER_DATABASE_URL",
        show_envvar=True,
        help="PostgreSQL URL (else DATABASE_URL; else the embedded server under ./.runner/)",
    ),
]
PrometheusOpt = Annotated[
    str | None,
    typer.Option(
        "--prometheus-url", envvar="RUNNER_PROMETHEUS_URL", show_envvar=True,
        help="the Prometheus that backfill pause conditions given as instant queries are asked "
             "(e.g. http://prometheus:9090)",
    ),
]
ConditionOpt = Annotated[
    str | None,
    typer.Option(
        "--condition-url", envvar="RUNNER_CONDITION_URL", show_envvar=True,
        help="a hot standby of the ledger's database where backfill pause conditions' SQL runs "
             "(its advisory locks cannot touch a run's key); the condition lock and the record "
             "stay on the ledger",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="machine-readable output")]



def _say(message: str, err: bool = False) -> None:
    """Every human-facing line: user text (keys, errors, reasons, --by, pause_when) is
    shown with its control characters escaped (runner/printable.py); JSON output is not."""
    typer.echo(printable(message), err=err)


def fail(message: str, code: int = 1) -> NoReturn:
    _say(f"runner: error: {message}", err=True)
    raise typer.Exit(code)


def _console() -> Console:
    return Console(width=None if sys.stdout.isatty() else 200, soft_wrap=True)


def _resolve_db(flag: str | None) -> DatabaseChoice:
    choice = choose_database(flag)
    if choice is not None:
        if choice.source == "flag" and _on_command_line("--database-url") and has_password(choice.url):
            _say("runner: warning: a password in --database-url is visible to every local user (ps, "
                 "/proc); pass the URL in RUNNER_DATABASE_URL, or the password in PGPASSWORD or a "
                 "password file (PGPASSFILE, ~/.pgpass)", err=True)
        return choice
    from runner.store import embedded

    server = embedded.start()
    for note in server.notes:
        _say(f"runner: {note}", err=True)
    state = "started" if server.started else "running"
    _say("runner: no database configured (--database-url, RUNNER_DATABASE_URL, DATABASE_URL); "
         f"using the embedded PostgreSQL in {_relative(server.home)}/ ({state}; "
         f"its log: {_relative(server.log_file)})", err=True)
    return DatabaseChoice(server.url, "embedded")


def _relative(path: Any) -> str:
    try:
        return str(path.relative_to(os.getcwd()))
    except ValueError:
        return str(path)


def _on_command_line(option: str) -> bool:
    """Whether the option was given on the command line (not read from its environment
    variable): what is on the command line, every local user can read."""
    return any(arg == option or arg.startswith(option + "=") for arg in sys.argv[1:])


@contextmanager
def _errors() -> Iterator[None]:
    """Turn expected failures into one clear line and exit code 1."""
    try:
        yield
    except (ConfigError, JobDefinitionError, JobRetired, operate.OperatorError, lanes.LaneError) as exc:
        fail(str(exc))
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fail(f"database error: {redact(first)}")
    except psycopg.Error as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        fail(f"database error: {type(exc).__name__}: {redact(first)}")


def _connect(choice: DatabaseChoice) -> psycopg.Connection[Any]:
    try:
        conninfo_to_dict(choice.url)
    except psycopg.ProgrammingError:
        # libpq's own message echoes the part it could not parse, the password included
        raise ConfigError(f"the database URL cannot be parsed (a URL needs percent-encoding: a "
                          f"space is %20): {redact(choice.url)}") from None
    try:
        conn = psycopg.connect(choice.url, autocommit=True, connect_timeout=10,
                               application_name="runner-cli")
        conn.execute("SET TIME ZONE 'UTC'")  # every time the CLI prints is UTC
        # the views' estimated costs (runner.alerts, job_health) pass the JIT thresholds on a
        # busy ledger, and compiling them costs seconds more than running them (RESULTS.md,
        # "runner.alerts is JIT compilation"); the console's and metrics' sessions do the same
        conn.execute("SET jit = off")
        return conn
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "connection failed"
        raise ConfigError(f"cannot connect to the database {redact(choice.url)}: "
                          f"{redact_error(first, choice.url)}") from None


def _open_ledger(flag: str | None) -> tuple[DatabaseChoice, psycopg.Connection[Any]]:
    """Connect and check the schema; the embedded database is migrated automatically."""
    choice = _resolve_db(flag)
    conn = _connect(choice)
    if choice.embedded and migrate.current_revision(conn) != migrate.head_revision():
        _say("runner: migrating the embedded database to head", err=True)
        migrate.upgrade(choice.url)
    migrate.check_schema(conn, choice.url)
    return choice, conn


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _print_json(rows: list[dict[str, Any]]) -> None:
    typer.echo(json.dumps(_jsonable(rows), ensure_ascii=False, indent=2))


def _print_table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> None:
    table = Table(title=printable(title), show_lines=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        # Text, not str: names and partition keys are shown as they are, never as markup
        # and with control characters escaped, like every human-facing line (_say)
        table.add_row(*(Text("" if row.get(c) is None else printable(_cell(row.get(c)))) for c in columns))
    _console().print(table)


def _cell(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat(timespec="seconds")
    return str(_jsonable(value))


# -- db ---------------------------------------------------------------------------------


LockTimeoutOpt = Annotated[str | None, typer.Option(
    "--lock-timeout", envvar="RUNNER_MIGRATE_LOCK_TIMEOUT",
    help="seconds each migration statement waits for a table lock before the migration is rolled "
         "back and tried again (default 5)")]
AttemptsOpt = Annotated[str | None, typer.Option(
    "--attempts", envvar="RUNNER_MIGRATE_ATTEMPTS",
    help="how many times the migration is tried before it fails, nothing applied (default 3)")]


RevisionOpt = Annotated[str, typer.Option(
    help="the alembic revision to migrate to (head: this runner's newest)")]


@db_app.command("upgrade")
def db_upgrade(database_url: DbOpt = None, revision: RevisionOpt = "head",
               lock_timeout: LockTimeoutOpt = None, attempts: AttemptsOpt = None) -> None:
    """Migrate the runner schema to head (idempotent), in one transaction. Each statement
    waits at most --lock-timeout for a lock; the migration is then rolled back and tried again,
    --attempts times in all, and fails with one line, nothing applied."""
    with _errors():
        timeout, tries = migrate.migrate_lock_timeout(lock_timeout), migrate.migrate_attempts(attempts)
        choice = _resolve_db(database_url)
        _connect(choice).close()
        migrate.upgrade(choice.url, revision, lock_timeout=timeout, attempts=tries)
        conn = _connect(choice)
        _say(f"runner schema at {migrate.current_revision(conn)} on {redact(choice.url)}")
        conn.close()


@db_app.command("downgrade")
def db_downgrade(revision: Annotated[str, typer.Argument(help="the revision to migrate down to")],
                 database_url: DbOpt = None,
                 lock_timeout: LockTimeoutOpt = None, attempts: AttemptsOpt = None) -> None:
    """Migrate the runner schema down to REVISION ('base' removes it); locks as for upgrade."""
    with _errors():
        timeout, tries = migrate.migrate_lock_timeout(lock_timeout), migrate.migrate_attempts(attempts)
        choice = _resolve_db(database_url)
        _connect(choice).close()
        migrate.downgrade(choice.url, revision, lock_timeout=timeout, attempts=tries)
        _say(f"runner schema downgraded to {revision}")


@db_app.command("current")
def db_current(database_url: DbOpt = None, as_json: JsonOpt = False) -> None:
    """Show the schema's revision and this runner's head."""
    with _errors():
        choice = _resolve_db(database_url)
        conn = _connect(choice)
        current = migrate.current_revision(conn)
        conn.close()
        head = migrate.head_revision()
        # the live SQL objects of this code not yet applied (sql/objects.txt): at the head only
        stale = migrate.unapplied_objects_of(choice.url) if current == head else []
        if as_json:
            typer.echo(json.dumps({"current": current, "head": head, "unapplied_objects": stale,
                                   "up_to_date": current == head and not stale}))
        else:
            _say(f"current: {current or '(none: run `runner db upgrade`)'}")
            _say(f"head:    {head}")
            if stale:
                _say(f"objects: {len(stale)} of this runner's SQL objects not applied yet "
                     f"({', '.join(stale[:3])}): run `runner db upgrade`")


@db_app.command("sql")
def db_sql(revision: RevisionOpt = "head") -> None:
    """Print the migration SQL for review (needs no database)."""
    with _errors():
        typer.echo(migrate.offline_sql(revision), nl=False)


# -- start ------------------------------------------------------------------------------


@app.command()
def start(
    app_spec: AppOpt = None,
    database_url: DbOpt = None,
    workers: Annotated[int, typer.Option(min=1, max=1000, help="handler threads")] = 10,
    max_inflight: Annotated[int, typer.Option(
        min=0, max=100000, help="runs claimed ahead of free handler threads (0: 2 x workers)")] = 0,
    poll_interval: Annotated[float, typer.Option(
        min=0.01, help="seconds between polls for retries, queued runs and takeovers")] = 1.0,
    grace: Annotated[float, typer.Option(
        min=0, help="seconds running handlers get at shutdown before their runs are handed over")] = 30.0,
    async_workers: Annotated[int, typer.Option(
        min=0, max=100000, help="async def handlers running at once (0: as many as --workers)")] = 0,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR")] = "INFO",
    log_format: Annotated[str, typer.Option(help="text, or json: one JSON object per event")] = "text",
    metrics_port: Annotated[int | None, typer.Option(
        min=0, max=65535, help="serve Prometheus metrics on this port")] = None,
    metrics_host: Annotated[str, typer.Option(
        help="the address the metrics endpoint listens on; it has no authentication, so the "
             "default is this machine only (0.0.0.0 or :: for every address)")] = "127.0.0.1",
    prometheus_url: PrometheusOpt = None,
    condition_url: ConditionOpt = None,
    retention_default: Annotated[str | None, typer.Option(
        help='how long runs of jobs without retention= are kept: "30d" or '
             '\'{"succeeded": "30d", "failed": "180d"}\' (default: forever)')] = None,
    prune_interval: Annotated[float, typer.Option(
        min=0.05, help="seconds between passes of the retention duty")] = 60.0,
    lanes_: Annotated[str | None, typer.Option(
        "--lanes", help="the lanes this process serves, e.g. realtime or bulk,correction "
                        "(default: every lane)")] = None,
    lane_slots: Annotated[str | None, typer.Option(
        help="handler slots per lane on this process, e.g. bulk=2,correction=4 (default: "
             "--workers for one lane; else realtime --workers, correction workers/2, others workers/4)")]
    = None,
) -> None:
    """Run the scheduling loop and workers until SIGTERM/SIGINT."""
    from runner.events import JsonFormatter, TextFormatter, event
    from runner.worker.loop import LoopConfig, Worker, own_process_gc
    from runner.worker.metrics import Metrics
    from runner.worker.signals import SignalStop

    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        fail(f"--log-level must be one of DEBUG, INFO, WARNING, ERROR, got {log_level!r}", 2)
    if log_format not in ("text", "json"):
        fail(f"--log-format must be text or json, got {log_format!r}", 2)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for noisy in ("alembic", "psycopg.pool"):
        logging.getLogger(noisy).setLevel(max(level, logging.WARNING))
    # from the first step: a SIGTERM however early (while the metrics endpoint or the worker
    # starts) stops the runner cleanly, deregistered, with exit code 0. The handler only
    # writes to a pipe; the stop itself runs on a thread of its own (runner/worker/signals.py: a
    # handler that takes a lock, logs or starts a thread can wait forever for the thread it
    # interrupted)
    stopping = SignalStop(logging.getLogger("runner"))
    stopping.install()
    with _errors():
        served = lanes.parse_lanes(lanes_)
        slots = lanes.parse_lane_slots(lane_slots)
        runner_app = load_app(app_spec)
        if not runner_app.jobs:
            raise ConfigError(f"the app {app_spec!r} registers no jobs")
        namespace = lock_namespace()
        choice, conn = _open_ledger(database_url)
        # a transaction or statement pool: refused before anything else (runner/store/pooler.py; the
        # lock session checks again when it opens and at every reconnect)
        pooler.check_session(conn)
        warning = None if choice.embedded else migrate.privilege_warning(conn)
        if condition_url:
            try:  # refused at start; checked again at every pass that uses it
                conditions.open_standby(conn, condition_url).close()
            except conditions.StandbyRefused as exc:
                raise ConfigError(str(exc)) from None
        conn.close()
        if warning is not None:
            event(logging.getLogger("runner"), "privileged_login", logging.WARNING, detail=warning)
        keep = None
        if retention_default is not None:
            keep = _retention_option(retention_default)
        config = LoopConfig(workers=workers, max_inflight=max_inflight, poll_interval=poll_interval,
                            grace=grace, prometheus_url=prometheus_url, condition_url=condition_url or None,
                            async_workers=async_workers,
                            retention_default=keep, prune_interval=prune_interval,
                            lanes=served, lane_slots=tuple(slots.items()))
        metrics = Metrics()
        if metrics_port is not None:
            try:
                metrics.serve(metrics_port, metrics_host)
            except OSError as exc:
                raise ConfigError(f"cannot serve metrics on {metrics_host} port {metrics_port}: "
                                  f"{exc.strerror or exc}") from None
            metrics.watch_ledger(lambda: _metrics_session(choice.url),
                                {name: job.schedule for name, job in runner_app.jobs.items()})
        worker = Worker(runner_app, choice.url, config, namespace=namespace, metrics=metrics)
        if stopping.requested.is_set():
            return
        stopping.stop_with(worker.stop)  # a signal during start: run() stops at once
        worker.start()
        own_process_gc()
        worker.run()
        if choice.embedded:  # the first five minutes: Ctrl-C stopped the runner, not the server
            _say(f"runner: stopped. The embedded PostgreSQL in {_relative(embedded_home())}/ keeps running "
                 "(the next command finds the same ledger): `runner embedded stop` stops it, "
                 "`runner embedded destroy` deletes it and its data", err=True)


# -- the embedded server ----------------------------------------------------------------


def embedded_home() -> Path:
    from runner.store import embedded

    return embedded.home_dir()


@embedded_app.command("status")
def embedded_status(as_json: JsonOpt = False) -> None:
    """Whether the embedded PostgreSQL of this directory runs, and where its data and log are."""
    from runner.store import embedded

    with _errors():
        info = embedded.describe()
    if as_json:
        _print_value(info)
        return
    home = _relative(Path(str(info["home"])))
    if info["pid"] is not None:
        _say(f"the embedded PostgreSQL in {home}/ is running (pid {info['pid']}); its data: "
             f"{_relative(Path(str(info['data'])))}, its log: {_relative(Path(str(info['log'])))}")
    elif info["initialized"]:
        _say(f"the embedded PostgreSQL in {home}/ is stopped; its data is kept in "
             f"{_relative(Path(str(info['data'])))} (any runner command starts it again)")
    else:
        _say(f"no embedded PostgreSQL in {home}/ (any runner command with no database configured makes one)")


@embedded_app.command("stop")
def embedded_stop() -> None:
    """Stop the embedded PostgreSQL of this directory; its data is kept."""
    from runner.store import embedded

    with _errors():
        was_running = embedded.stop()
    home = _relative(embedded_home())
    _say(f"stopped the embedded PostgreSQL in {home}/ (its data is kept)" if was_running
         else f"the embedded PostgreSQL in {home}/ was not running")


@embedded_app.command("destroy")
def embedded_destroy(yes: Annotated[bool, typer.Option("--yes", help="do not ask")] = False) -> None:
    """Stop the embedded PostgreSQL of this directory and delete its data: every run, job
    and request of that ledger."""
    from runner.store import embedded

    home = _relative(embedded_home())
    info = embedded.describe()
    if not info["initialized"]:
        _say(f"no embedded PostgreSQL data in {home}/: nothing to delete")
        return
    _confirm(f"delete the embedded PostgreSQL in {home}/ and its whole ledger?", yes)
    with _errors():
        embedded.destroy()
    _say(f"deleted the embedded PostgreSQL in {home}/ (the next command with no database configured "
         "makes a new one)")


# -- listings ---------------------------------------------------------------------------


@app.command()
def jobs(app_spec: AppOpt = None, as_json: JsonOpt = False,
         count: Annotated[int, typer.Option("--next", min=0, max=100, help="next slots shown")] = 3,
         ) -> None:
    """The registered jobs: schedule, zone, policies, next slots."""
    from datetime import UTC

    with _errors():
        runner_app = load_app(app_spec)
        now = datetime.now(UTC)
        rows = []
        for job in runner_app.jobs.values():
            sched = job.schedule
            slots, t = [], now
            for _ in range(count):
                t = sched.next_after(t)
                slots.append(t)
            rows.append({
                "job_name": job.name,
                "schedule": sched.cron if sched.kind == "cron" else f"every {sched.every}",
                "timezone": sched.timezone,
                "partitions": (list(job.partitions) if isinstance(job.partitions, tuple)
                               else "dynamic" if job.partitions else None),
                "max_attempts": job.max_attempts,
                "version": job.version,
                "owner": job.owner,
                "paused": job.paused,
                "next_slots": slots,
            })
    if as_json:
        _print_json(rows)
    else:
        _print_table("jobs", rows, ["job_name", "schedule", "timezone", "partitions", "max_attempts",
                                     "version", "owner", "paused", "next_slots"])


def _parse_time(value: str | None, name: str) -> datetime | None:
    """A time option: the registry's one time parser (runner/actions/registry.py); exit 2 if bad."""
    try:
        return actions.parse_time(value, name)
    except actions.ParamError as exc:
        fail(str(exc), 2)


def _params(action: str, **raw: Any) -> dict[str, Any]:
    """An action command's options, parsed by the registry's one parser; exit 2 if bad."""
    try:
        return actions.parse(action, raw, cli=True)
    except actions.ParamError as exc:
        fail(str(exc), 2)


def _dispatches(action: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Marks a command as the CLI face of the registry's ``action`` (tests/test_actions.py
    checks that the marked commands are exactly the registry's actions)."""
    actions.get(action)

    def mark(fn: Callable[..., None]) -> Callable[..., None]:
        setattr(fn, "runner_action", action)  # noqa: B010 (read back from the click command)
        return fn
    return mark


RUN_STATUSES = ("pending", "running", "succeeded", "failed", "dead", "skipped", "coalesced",
                "awaiting_approval", "cancelled")


@app.command()
def runs(
    database_url: DbOpt = None,
    job: Annotated[str | None, typer.Option(help="only this job")] = None,
    status: Annotated[list[str] | None, typer.Option(help="only these statuses (repeatable)")] = None,
    partition: Annotated[str | None, typer.Option(help="only this partition key")] = None,
    since: Annotated[str | None, typer.Option(help="slots at or after (ISO 8601)")] = None,
    until: Annotated[str | None, typer.Option(help="slots before (ISO 8601)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100000, help="runs shown at most")] = 50,
    show: Annotated[int | None, typer.Option(
        "--show", min=1, help="one run in full: its facts and last checkpoint, then each attempt "
                              "with its error, traceback and the handler's last heartbeat")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The ledger's runs, newest slot first (``--show ID``: one run and its attempts)."""
    if show is not None:
        _show_run(show, database_url, as_json)
        return
    for s in status or []:
        if s not in RUN_STATUSES:
            fail(f"--status must be one of {', '.join(RUN_STATUSES)}; got {s!r}", 2)
    params = {
        "job_name": job, "statuses": status or None, "partition_key": partition,
        "since": _parse_time(since, "--since"), "until": _parse_time(until, "--until"),
        "limit": limit, "run_id": show,
    }
    with _errors():
        _, conn = _open_ledger(database_url)
        rows = ledger.dict_rows(conn, Q["list_runs"], params)
        conn.close()
    if as_json:
        _print_json(rows)
    else:
        columns = ["id", "job_name", "schedule_slot", "partition_key", "status", "trigger",
                   "attempt", "fence", "started_at", "finished_at", "last_error"]
        if any(r["misfire_tier"] for r in rows):  # jobs with misfire tiers: which one decided
            columns.insert(6, "misfire_tier")
        if any(r["checkpoint_at"] for r in rows):  # long jobs: their last checkpoint
            columns += ["checkpoint_at", "checkpoint_bytes", "checkpoint_summary"]
        _print_table("runs", rows, columns)


@app.command()
def gaps(
    database_url: DbOpt = None,
    job: Annotated[str | None, typer.Option(help="only this job")] = None,
    since: Annotated[str | None, typer.Option(help="slots at or after (ISO 8601)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000000, help="gaps shown at most")] = 1000,
    as_json: JsonOpt = False,
) -> None:
    """Expected slots with no successful run (runner.missing_slots), oldest first."""
    params = {"job_name": job, "since": _parse_time(since, "--since"), "limit": limit + 1}
    gap_q = queries("gaps")
    with _errors():
        _, conn = _open_ledger(database_url)
        # the watermarks only make the scan cheaper: a read-only role or a replica skips them
        with suppress(psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction):
            conn.execute(gap_q["advance_watermarks"])
        rows = ledger.dict_rows(conn, gap_q["list_gaps"], params)
        conn.close()
    if len(rows) > limit:
        rows = rows[:limit]
        _say(f"runner: showing the oldest {limit} gaps; there are more (--limit)", err=True)
    if as_json:
        _print_json(rows)
    else:
        rows = [{**r, "lateness": _span(r["lateness"])} for r in rows]
        _print_table("gaps", rows, ["job_name", "schedule_slot", "local_slot", "partition_key",
                                     "state", "run_id", "attempt", "lateness", "paused",
                                     "last_error"])


@app.command()
def check(
    database_url: DbOpt = None,
    since: Annotated[str | None, typer.Option(help="only slots at or after (ISO 8601)")] = None,
    as_json: JsonOpt = False,
) -> None:
    """The ledger audit: every invariant violation with the rows involved (runner.check_v1).
    Exit 1 when any is found, 0 when none."""
    started = _parse_time(since, "--since")
    with _errors():
        _, conn = _open_ledger(database_url)
        rows = audit.violations(conn, since=started)
        copied = ledger.ledger_copy(conn)
        conn.close()
    if copied:  # not an invariant of the ledger, but what its runners do with it (runner/actions/copies.py)
        _say(f"note: {copied}", err=True)
    if as_json:
        _print_json(rows)
    elif rows:
        _print_table(f"ledger audit: {len(rows)} violation(s)", rows, audit.COLUMNS)
    else:
        _say("ledger audit: no violations")
    if rows:
        raise typer.Exit(1)


# -- operators: status, rerun, pause, resume (logic in runner/actions/operate.py) ------------------

ReasonOpt = Annotated[str, typer.Option("--reason", help="why (required; kept in runner.requests)")]
ByOpt = Annotated[str | None, typer.Option("--by", help="who asks (default: OS user@host)")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")]


def _print_value(value: Any) -> None:
    typer.echo(json.dumps(_jsonable(value), ensure_ascii=False, indent=2))


def _reason(value: str) -> str:
    try:
        return actions.checked_reason(value, "--reason")
    except actions.ParamError as exc:
        fail(str(exc), 2)


def _confirm(question: str, yes: bool) -> None:
    """Ask on the terminal unless --yes. With no terminal to ask on, the answer is no."""
    if yes:
        return
    if not sys.stdin.isatty():
        fail("not confirmed: stdin is not a terminal to ask on; nothing written "
             "(pass --yes to confirm without a prompt)")
    if not typer.confirm(printable(question), default=False, err=True):
        fail("not confirmed; nothing written")


def _show_run(run_id: int, database_url: str | None, as_json: bool) -> None:
    """``runner runs --show ID``: the run, then each attempt: status, owner, times, the error
    line, the handler's last heartbeat and the traceback (redacted and bounded when it was
    recorded: runner/worker/attempt.py), each line escaped like every human-facing line."""
    with _errors():
        _, conn = _open_ledger(database_url)
        found = ledger.dict_rows(conn, Q["show_run"], {"run_id": run_id})
        attempts = ledger.dict_rows(conn, operate.Q["run_attempts"], {"run_id": run_id}) if found else []
        conn.close()
    if not found:
        fail(f"no run {run_id}")
    run = found[0]
    if as_json:
        _print_value({"run": run, "attempts": attempts})
        return
    part = f", partition {run['partition_key']!r}" if run["partition_key"] else ""
    _say(f"run {run['id']} of job {run['job_name']!r}, slot {_cell(run['schedule_slot'])}{part}: "
         f"{run['status']} (trigger {run['trigger']}, attempt {run['attempt']}, fence {run['fence']})")
    _say(f"  business date {run['business_date']}, window {_cell(run['window_start'])} .. "
         f"{_cell(run['window_end'])}")
    if run["last_error"]:
        _say(f"  last error: {run['last_error']}")
    if run["checkpoint_at"] is not None:  # a long job's last checkpoint (runner/worker/checkpoints.py)
        _say(f"  checkpoint: {_cell(run['checkpoint_at'])}, {run['checkpoint_bytes']} bytes, "
             f"{run['checkpoints']} taken by this run; summary: {run['checkpoint_summary']}")
        text = json.dumps(run["checkpoint"], sort_keys=True)
        _say(f"  checkpoint state: {text if len(text) <= 500 else text[:500] + ' ... (--json for all)'}")
    elif run["checkpoints"]:
        _say(f"  checkpoint: none kept ({run['checkpoints']} taken by this run)")
    if not attempts:
        _say("  no attempts yet")
    for a in attempts:
        _say(f"attempt {a['attempt']} (fence {a['fence']}, {a['trigger']}): {a['status']} on "
             f"{a['owner_host']}:{a['owner_pid']}, started {_cell(a['started_at'])}, finished "
             f"{_cell(a['finished_at']) if a['finished_at'] else '-'}")
        if a["error_class"] or a["error_message"]:
            _say(f"  error: {a['error_class'] or ''}: {a['error_message'] or ''}")
        beat = a["last_heartbeat"]
        if beat:
            _say(f"  last heartbeat of the handler: {beat.get('at')} (processed {beat.get('processed')}, "
                 f"failed {beat.get('failed')}; {beat.get('beats')} beat(s))")
        if a["traceback"]:
            _say("  traceback:")
            for line in a["traceback"].rstrip("\n").split("\n"):
                _say(f"    {line}")


def _span(value: timedelta | None) -> str:
    if value is None:
        return ""
    left = int(value.total_seconds())
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts[:2]) or "0s"


def _counts(row: dict[str, Any], *keys: str) -> str:
    values = [row.get(k) for k in keys]
    return "" if all(v is None for v in values) else "/".join(str(v or 0) for v in values)


@app.command()
def status(
    app_spec: AppOpt = None,
    database_url: DbOpt = None,
    job: Annotated[str | None, typer.Option(help="only this job")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Per-job health (last success, counts, lag, missing, next slot), then the alerts."""
    with _errors():
        runner_app = load_app(app_spec) if app_spec else None
        _, conn = _open_ledger(database_url)
        report = operate.status(conn, runner_app, job)
        conn.close()
    clock = report.clock
    if as_json:
        _print_value({"now": report.now, "jobs": report.jobs, "alerts": report.alerts,
                      "backfills": report.backfills, "replica": bool(clock and clock.replica),
                      "replay_lag_seconds": clock.replay_lag if clock else 0.0, "runners": report.runners})
        return
    if clock is not None and clock.replica:
        _say(f"read from a replica: the ledger as of {clock.as_of.isoformat(timespec='seconds')} "
             f"(replay lag {clock.replay_lag:.0f} s); lag, missing slots and alerts are judged then")
    _say(_runners_line(report.runners))
    rows = [{
        "job": r["job_name"],
        "owner": r.get("owner"),
        "paused": "retired" if r.get("retired_at") else "paused" if r.get("paused") else "",
        "last success": r.get("last_success_at"),
        "its slot": r.get("last_success_slot"),
        "business date": r.get("last_success_business_date"),
        "last slot": ", ".join(f"{s} {n}" for s, n in sorted((r.get("last_slot_statuses") or {}).items())),
        "processed/failed": _counts(r, "last_processed", "last_failed"),
        "24h ok/failed/dead": _counts(r, "succeeded_24h", "failed_24h", "dead_24h"),
        "lag": _span(r.get("lag")),
        # apart from lag (issue 30): runs of backfill plans and catch-up runs still open
        "backfill/catch-up open": _counts(r, "backfill_open", "catch_up_open"),
        "missing": r.get("missing"),
        "next slot": r.get("next_slot"),
    } for r in report.jobs]
    _print_table(f"job health at {report.now.isoformat(timespec='seconds')}", rows, list(rows[0]) if rows
                 else ["job"])
    if report.backfills:
        _print_table("backfills (not finished, or finished in the last 24 h)", [{
            "id": b["id"], "job": b["job_name"], "status": b["status"],
            "done": f"{b['done']}/{b['expected_runs']}", "remaining": b["remaining"],
            "failures": b["failures"], "paused by": b["pause_cause"] or "",
            "pauses": ", ".join(f"{k} {v}" for k, v in sorted((b["pauses"] or {}).items())),
            "verification": _verify_short(b)} for b in report.backfills],
            ["id", "job", "status", "done", "remaining", "failures", "paused by", "pauses", "verification"])
    if report.alerts:
        _print_table("alerts", report.alerts, ["kind", "job_name", "owner", "run_id", "since", "detail"])
    else:
        _say("no alerts")


def _runners_line(runners: dict[str, Any]) -> str:
    """`runner status`'s first line: how many runners are live, and since when none is."""
    live = runners.get("live") or 0
    if live:
        return f"runners: {live} live (runner.instances; the console's Runners page)"
    if runners.get("last_beat") is None:
        return ("runners: NONE live, and no runner has ever registered with this ledger: nothing runs "
                "until `runner start`")
    return (f"runners: NONE live: the newest heartbeat was {_span(runners.get('since_beat'))} ago "
            f"({_cell(runners['last_beat'])}); nothing is claimed or run until a `runner start` runs again")


def _metrics_session(url: str) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, application_name="runner-metrics")


def _verify_short(plan: dict[str, Any]) -> str:
    """A plan's verification in a few words (runner.backfill_plans row)."""
    status = plan["verify_status"]
    if status is None:
        return "pending" if plan["status"] != "completed" else "not recorded yet"
    if plan["verify_kinds"] is None:
        return str(status)
    bad = [k["name"] for k in plan["verify_kinds"] if not k.get("passed")]
    return (f"{status}: {plan['verify_passing']}/{len(plan['verify_kinds'])} kinds passed "
            f"(min {plan['verify_min_passing']})" + (f"; not passed: {', '.join(bad)}" if bad else ""))


def _show_rerun(plan: operate.RerunPlan) -> None:
    run = plan.run
    _say(plan.run_label)
    _say(f"  status {run['status']}, trigger {run['trigger']}, attempt {run['attempt']} "
               f"(fence {run['fence']}), business date {run['business_date']}")
    if run["last_error"]:
        _say(f"  last error: {' '.join(run['last_error'].split())[:300]}")
    if plan.attempts:
        _print_table(f"attempts of run {run['id']}", plan.attempts,
                     ["attempt", "fence", "trigger", "status", "owner_host", "owner_pid", "started_at",
                      "finished_at", "error_class", "error_message"])
    else:
        _say("  no attempts yet")
    if plan.effects is not None:
        if plan.effects:
            shown = [c for c in ("effect_key", "stage", "status", "send_count", "updated_at")
                     if any(c in e for e in plan.effects)]
            _print_table(f"effects recorded for run {run['id']} (a rerun does not repeat confirmed ones)",
                         plan.effects, shown or list(plan.effects[0]))
        else:
            _say("  no effects recorded")
    if plan.refusal is None:
        _say(f"will set it pending (trigger manual) for a new attempt now; its {run['attempt']} "
                   "earlier attempt(s) stop counting against max_attempts")
        if run["job_paused"]:
            _say(f"note: job {run['job_name']!r} is paused: the attempt starts once it is resumed")


@app.command()
@_dispatches("rerun")
def rerun(
    job: Annotated[str, typer.Argument(help="the job's name")],
    slot: Annotated[str, typer.Option("--slot", help="the run's slot, ISO 8601 with offset")],
    reason: ReasonOpt,
    partition: Annotated[str, typer.Option("--partition", help="the run's partition key")] = "",
    by: ByOpt = None,
    force: Annotated[bool, typer.Option("--force", help="rerun a run that already succeeded")] = False,
    resume: Annotated[bool, typer.Option(
        "--resume", help="continue from the run's last checkpoint (default: from scratch)")] = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """A new attempt of one run (trigger manual): shows what it touches, asks, audits. It
    starts from scratch, or with --resume from the run's last checkpoint (the impact says)."""
    params = _params("rerun", job=job, slot=slot, partition=partition, force=force, resume=resume)
    why = _reason(reason)
    with _errors():
        _, conn = _open_ledger(database_url)
        plan: operate.RerunPlan = actions.plan(conn, "rerun", params)
        if not as_json:
            _show_rerun(plan)
            _say(f"  the next attempt starts {plan.starts(resume)}")
        if plan.refusal:
            fail(plan.refusal)
        _confirm(f"Rerun {plan.run_label}?", yes)
        done = actions.act(conn, "rerun", plan, params, by, why)
        conn.close()
    request, queued = done["request"], done["run"]
    if as_json:
        _print_value({"run": plan.run, "attempts": plan.attempts, "effects": plan.effects,
                      "starts": plan.starts(resume), "request": request, "queued": queued})
    else:
        _say(f"run {queued['id']} is pending (trigger manual), due now; request {request['id']} "
                   f"by {request['who']}")



@app.command(name="rerun-many")
@_dispatches("rerun_many")
def rerun_many(
    reason: ReasonOpt,
    job: Annotated[str | None, typer.Argument(help="the job's name (optional with --backfill)")] = None,
    range_from: Annotated[str | None, typer.Option(
        "--from", help="slots at or after (ISO 8601 with offset)")] = None,
    range_to: Annotated[str | None, typer.Option("--to", help="slots before (ISO 8601 with offset)")] = None,
    partition: Annotated[str | None, typer.Option("--partition", help="only this partition key")] = None,
    status: Annotated[list[str] | None, typer.Option(
        "--status", help="failed and/or dead (repeatable; default: dead)")] = None,
    plan_id: Annotated[int | None, typer.Option(
        "--backfill", help="only the runs of this backfill plan")] = None,
    by: ByOpt = None, yes: YesOpt = False, as_json: JsonOpt = False, database_url: DbOpt = None,
) -> None:
    """Rerun every failed or dead run of a job in a range of slots, or of a backfill: shows
    them, asks, then one audited request queues them all (trigger manual, due now)."""
    params = _params("rerun_many", job=job, **{"from": range_from, "to": range_to}, partition=partition,
                     statuses=status or None, plan_id=plan_id)
    why = _reason(reason)
    with _errors():
        _, conn = _open_ledger(database_url)
        planned = actions.plan(conn, "rerun_many", params)
        if not as_json:
            _print_table(f"to rerun: {planned.describe()}", planned.runs,
                         ["id", "schedule_slot", "partition_key", "status", "attempt", "last_error"])
        if planned.refusal:
            fail(planned.refusal)
        _say(f"will set {_plural(len(planned.runs), 'run')} pending (trigger manual), due now, each with "
             "a full budget of attempts; one request")
        _say(f"checkpoints: {planned.starts()}")
        _confirm(f"Rerun {_plural(len(planned.runs), 'run')} of job {planned.job_name!r}?", yes)
        done = actions.act(conn, "rerun_many", planned, params, by, why)
        conn.close()
    if as_json:
        _print_value({"selection": planned.selection, "runs": done["runs"], "request": done["request"]})
    else:
        _say(f"{_plural(len(done['runs']), 'run')} pending (trigger manual), due now; request "
             f"{done['request']['id']} by {done['request']['who']}")

def _toggle_job(job: str, on: bool, words: tuple[str, str, str, str],
                describe: Callable[[dict[str, Any]], list[str]],
                reason: str, by: str | None, yes: bool, as_json: bool, database_url: str | None) -> None:
    """An audited switch of one job (pause/resume, retire/unretire: the registry's action
    named by the verb): the plan, what it will do (``describe``), the confirmation, one
    request written; nothing when already so. ``words``: the verb on and off ("pause",
    "resume"), the state on and off ("paused", "not paused")."""
    verb = words[0] if on else words[1]
    params = _params(verb, job=job)
    why = _reason(reason)
    with _errors():
        _, conn = _open_ledger(database_url)
        plan = actions.plan(conn, verb, params)
        done = None
        if plan.changes:
            if not as_json:
                for line in describe(plan.job):
                    _say(line)
            _confirm(f"{verb.capitalize()} job {job!r}?", yes)
            done = actions.act(conn, verb, plan, params, by, why)
            if done["request"] is None:
                done = None
        conn.close()
    if as_json:
        _print_value({"job": plan.job, "changed": done is not None,
                      "request": done["request"] if done else None})
    elif done is None:
        _say(f"job {job!r} is already {words[2] if on else words[3]}; nothing written")
    else:
        _say(f"job {job!r} {verb}d; request {done['request']['id']} by {done['request']['who']}")


def _pause_or_resume(job: str, paused: bool, reason: str, by: str | None, yes: bool, as_json: bool,
                     database_url: str | None) -> None:
    def describe(state: dict[str, Any]) -> list[str]:
        return [f"job {job!r}: {state['running']} run(s) running, {state['queued']} "
                "queued (pending or waiting for a retry)",
                "will pause it: no new slot, retry or rerun starts until `runner resume`; "
                "running attempts finish" if paused else
                "will resume it: new slots, and queued runs that are due, start again"]

    _toggle_job(job, paused, ("pause", "resume", "paused", "not paused"), describe, reason, by, yes,
                as_json, database_url)


@app.command()
@_dispatches("pause")
def pause(
    job: Annotated[str, typer.Argument(help="the job's name")],
    reason: ReasonOpt,
    by: ByOpt = None,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """Stop new runs of a job (slots, retries, reruns) until `runner resume`; audited."""
    _pause_or_resume(job, True, reason, by, yes, as_json, database_url)


@app.command()
@_dispatches("resume")
def resume(
    job: Annotated[str, typer.Argument(help="the job's name")],
    reason: ReasonOpt,
    by: ByOpt = None,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """Let a paused job start new runs again; audited."""
    _pause_or_resume(job, False, reason, by, yes, as_json, database_url)


def _retention_option(value: str) -> Any:
    from runner.model.jobs import parse_retention
    from runner.model.schedule import ScheduleError

    text = value.strip()
    try:
        parsed: Any = json.loads(text) if text.startswith("{") else text
        return parse_retention(parsed, field_name="--retention-default")
    except json.JSONDecodeError as exc:
        fail(f"--retention-default: not valid JSON: {exc.msg}", 2)
    except ScheduleError as exc:
        fail(f"--retention-default: {exc.message}", 2)


def _retire_or_unretire(job: str, retire: bool, reason: str, by: str | None, yes: bool, as_json: bool,
                        database_url: str | None) -> None:
    def describe(state: dict[str, Any]) -> list[str]:
        return [f"job {job!r}: {state['running']} run(s) running, {state['queued']} queued "
                f"(pending or waiting for a retry); in the code of {state['live_runners']} "
                "live runner(s)",
                "will retire it: from now on its slots are not expected (gap scan, alerts, health), "
                "no runner starts its later slots, and a runner whose code still defines it refuses "
                "to start; running attempts finish; its history stays until retention prunes it"
                if retire else
                f"will unretire it: its slots are expected again from now on (the slots since "
                f"{state['retired_at'].isoformat()} stay not expected), and runners may define it again"]

    _toggle_job(job, retire, ("retire", "unretire", "retired", "not retired"), describe, reason, by, yes,
                as_json, database_url)


@app.command()
@_dispatches("retire")
def retire(
    job: Annotated[str, typer.Argument(help="the job's name")],
    reason: ReasonOpt,
    by: ByOpt = None,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """Retire a job removed from the code: its later slots are not expected; audited."""
    _retire_or_unretire(job, True, reason, by, yes, as_json, database_url)


@app.command()
@_dispatches("unretire")
def unretire(
    job: Annotated[str, typer.Argument(help="the job's name")],
    reason: ReasonOpt,
    by: ByOpt = None,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """Expect a retired job's slots again from now on (runners may define it again); audited."""
    _retire_or_unretire(job, False, reason, by, yes, as_json, database_url)


@app.command()
@_dispatches("prune")
def prune(
    database_url: DbOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="show what would go; delete nothing")] = False,
    batch: Annotated[int, typer.Option(min=1, max=10000, help="runs per transaction")] = 1000,
    limit: Annotated[int | None, typer.Option(min=1, help="stop after this many runs")] = None,
    archive_table: Annotated[str | None, typer.Option(
        help="copy every pruned run (with attempts and effects, as JSON) into this table first")] = None,
    archive_file: Annotated[str | None, typer.Option(
        help="append every pruned run (with attempts and effects) to this file as JSON lines, first")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Apply the retention policy now (runners also do it in the background)."""
    from runner.actions import retention

    if archive_table and archive_file:
        fail("give --archive-table or --archive-file, not both", 2)
    if archive_table is not None:
        try:
            retention.check_archive_table(archive_table)
        except ValueError as exc:
            fail(str(exc), 2)
    # a dry run deletes nothing, so it archives nothing: no file or table is made
    params = _params("prune", batch=batch, limit=limit, archive_table=None if dry_run else archive_table,
                     archive_file=None if dry_run else archive_file)
    with _errors():
        _, conn = _open_ledger(database_url)
        # the dry run is the action's impact; the prune itself is not audited, asks nothing
        report = (actions.plan(conn, "prune", params, namespace=lock_namespace()) if dry_run else
                  actions.act(conn, "prune", None, params, None, "", namespace=lock_namespace()))
        conn.close()
    if as_json:
        _print_value({k: report[k] for k in ("dry_run", "runs", "attempts", "effects", "by_job")})
        return
    verb = "would prune" if dry_run else "pruned"
    typer.echo(f"{verb} {_plural(report['runs'], 'run')} ({_plural(report['attempts'], 'attempt')}, "
               f"{_plural(report['effects'], 'effect')})"
               + (" (a dry run looks at one batch: pass --limit to look further)"
                  if dry_run and report["more"] else ""))
    for name, statuses in sorted(report["by_job"].items()):
        typer.echo(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())))


# == backfills and approvals (logic in runner/actions/backfill.py and runner/actions/approvals.py) =========


class _BackfillGroup(TyperGroup):
    """``runner backfill JOB ...`` creates a plan, ``runner backfill list|show|pause|resume|
    cancel`` act on plans: a first word that names no command is the JOB of the implicit
    ``create`` (so a job named like a command needs ``runner backfill create JOB``)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["create", *args]
        return super().resolve_command(ctx, args)


backfill_app = typer.Typer(
    cls=_BackfillGroup, no_args_is_help=True,
    help="Throttled re-execution of a range of slots: `runner backfill JOB --from A --to B "
         "--reason R`, and `runner backfill list|show|pause|resume|cancel`.")
app.add_typer(backfill_app, name="backfill")

PLAN_STATUSES = ("planned", "running", "paused", "cancelled", "completed")


def _when(value: str, name: str) -> datetime:
    parsed = _parse_time(value, name)
    assert parsed is not None
    return parsed


def _plural(count: int, what: str) -> str:
    return f"{count} {what}" if count == 1 else f"{count} {what}s"


def _states(states: dict[str, int], keys: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {states[k]}" for k in keys if states.get(k))


def _show_impact(planned: backfill.BackfillPlan) -> None:
    s, spec = planned.summary(), planned.spec
    parts = (f" x partitions {', '.join(map(repr, planned.partitions))}" if planned.partitions
             else "")
    _say(f"backfill of job {spec.job_name!r}: {_plural(planned.slot_count, 'slot')} in "
               f"[{spec.range_from.isoformat()}, {spec.range_to.isoformat()}){parts}: "
               f"{_plural(s['expected_runs'], 'run')}")
    _say(f"  already succeeded: {s['already_succeeded']}"
               + ((" (forced: each gets a new attempt)" if spec.force
                   else " (left alone; --force runs them again)") if s["already_succeeded"] else ""))
    _say(f"  no run yet:        {s['will_insert']} (inserted, pending)")
    requeue = _states(planned.states, backfill.REQUEUED)
    _say(f"  run again:         {s['will_requeue']}" + (f" ({requeue}): a new attempt of the same run"
                                                              if requeue else ""))
    _show_starts(planned)
    alone = {k: v for k, v in s["left_alone"].items() if k != "succeeded"}
    if alone:
        _say(f"  left alone:        {_states(alone, list(alone))} (running or queued already, "
                   "or in another backfill)")
        for run in planned.running:
            _say(f"    running: run {run['id']} slot {run['schedule_slot'].isoformat()}"
                       + (f" partition {run['partition_key']!r}" if run["partition_key"] else "")
                       + f" (attempt {run['attempt']}, fence {run['fence']})")
    if planned.effects is not None:
        effects = ", ".join(f"{k} {v}" for k, v in sorted(planned.effects.items()))
        _say(f"  effects recorded:  {effects or 'none'}"
                   + (" (a confirmed effect is never sent again)" if effects else ""))
    limits = [f"lane {spec.lane!r}", f"concurrency {spec.concurrency}",
              f"rate {spec.rate:g}/s" if spec.rate else "rate unlimited",
              f"pause after {spec.max_failures} failure(s)" if spec.max_failures is not None
              else "no failure threshold"]
    _say(f"  runs with: {', '.join(limits)}")
    if spec.pause_when:
        _say(f"  pauses when: {spec.pause_when}  (now: {planned.pause_when_now}; "
             f"evaluated every {spec.pause_every_or_default} s)")


def _show_starts(planned: backfill.BackfillPlan) -> None:
    """Where the runs queued again start (issue 33): from scratch, or with --resume from their
    last checkpoints; each run listed (those with a checkpoint first, the first few)."""
    queued = planned.will_requeue + planned.will_force
    if not queued:
        return
    have = planned.with_checkpoint
    some = f"{have} of the {_plural(queued, 'run')} queued again {'has' if have == 1 else 'have'} one"
    if not have:
        _say(f"  checkpoints:       none of the {_plural(queued, 'run')} queued again has one: "
             "each starts from scratch")
    elif planned.spec.resume:
        _say(f"  checkpoints:       {some}: --resume, each continues from its checkpoint")
    else:
        _say(f"  checkpoints:       {some}: cleared, each starts from scratch (--resume continues from them)")
    for run in planned.starts:
        _say(f"    run {run['id']} slot {run['schedule_slot'].isoformat()}"
             + (f" partition {run['partition_key']!r}" if run["partition_key"] else "")
             + f" ({run['status']}): starts {run['starts']}")
    if queued > len(planned.starts):
        _say(f"    and {queued - len(planned.starts)} more")


@backfill_app.command("create")
@_dispatches("backfill")
def backfill_create(
    job: Annotated[str, typer.Argument(help="the job's name")],
    range_from: Annotated[str, typer.Option("--from", help="first slots at or after (ISO 8601 with offset)")],
    range_to: Annotated[str, typer.Option("--to", help="slots before (ISO 8601 with offset)")],
    reason: Annotated[str | None, typer.Option(
        "--reason", help="why (required unless --dry-run; kept in runner.requests)")] = None,
    partition: Annotated[list[str] | None, typer.Option(
        "--partition", help="only these partitions (repeatable; default: the job's)")] = None,
    by: ByOpt = None,
    lane: Annotated[str, typer.Option(
        help="the lane its runs belong to (runner lane list: bulk by default)")] = "bulk",
    concurrency: Annotated[int, typer.Option(min=1, help="runs of the plan running at once, at most")] = 1,
    rate: Annotated[float | None, typer.Option(help="runs started per second, at most (default: unlimited)")]
    = None,
    max_failures: Annotated[int, typer.Option(
        min=0, help="pause when more runs than this are failed or dead")] = 10,
    pause_when: Annotated[str | None, typer.Option(
        help="pause when this SQL returns true (one boolean; run as the condition role of "
             "sql/roles.sql, read-only, 1 s timeout, every --pause-every seconds)")] = None,
    pause_when_prometheus: Annotated[str | None, typer.Option(
        help="pause when this Prometheus instant query has a non-zero sample (asked of "
             "--prometheus-url, every --pause-every seconds)")] = None,
    pause_every: Annotated[str | None, typer.Option(
        metavar="SECONDS",
        help="evaluate the pause condition at most once every SECONDS across all runners "
             "(1 to 3600; default 5; only with --pause-when or --pause-when-prometheus)")] = None,
    prometheus_url: PrometheusOpt = None,
    force: Annotated[bool, typer.Option(help="run again slots that already succeeded")] = False,
    resume: Annotated[bool, typer.Option(
        "--resume", help="the runs queued again continue from their last checkpoints "
                         "(default: from scratch)")] = False,
    dry_run: Annotated[bool, typer.Option(help="show the impact; write nothing")] = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    app_spec: AppOpt = None,
    database_url: DbOpt = None,
) -> None:
    """Plan a backfill of JOB over [--from, --to): shows the impact, asks, writes the plan.
    Runs queued again (failed, dead, ..., and succeeded ones with --force) start from scratch,
    or with --resume from their last checkpoints (the impact lists which)."""
    _when(range_from, "--from")
    _when(range_to, "--to")
    if reason is None and not dry_run:
        fail("missing option '--reason' (why; kept in runner.requests)", 2)
    why = _reason(reason) if reason is not None else ""
    if rate is not None and not rate > 0:
        fail("--rate must be above 0 (runs per second)", 2)
    if pause_when is not None and pause_when_prometheus is not None:
        fail("--pause-when and --pause-when-prometheus: give one of them", 2)
    if pause_every is not None and pause_when is None and pause_when_prometheus is None:
        fail("--pause-every needs a condition (--pause-when or --pause-when-prometheus)", 2)
    if pause_when_prometheus is not None:
        pause_when = PROMETHEUS_CONDITION + pause_when_prometheus
    params = _params("backfill", job=job, **{"from": range_from, "to": range_to}, partitions=partition,
                     lane=lane, concurrency=concurrency, rate=rate, max_failures=max_failures,
                     pause_when=pause_when, pause_every=pause_every, force=force, resume=resume)
    with _errors():
        runner_app = load_app(app_spec)
        if job not in runner_app.jobs:
            raise ConfigError(f"the app {app_spec!r} defines no job {job!r}")
        _, conn = _open_ledger(database_url)
        planned: backfill.BackfillPlan = actions.plan(conn, "backfill", params, app=runner_app,
                                                      prometheus_url=prometheus_url)
        if planned.clamped:
            _say(planned.clamped, err=True)  # one line: the range ends at now
        if dry_run:
            conn.close()
            if as_json:
                _print_value({"dry_run": True, **planned.summary()})
            else:
                _show_impact(planned)
                _say("dry run: nothing written")
            return
        if not as_json:
            _show_impact(planned)
        _confirm(f"Create this backfill of {_plural(len(planned.expected), 'run')}?", yes)
        done = actions.act(conn, "backfill", planned, params, by, why)
        conn.close()
    plan_row = done["backfill"]
    if as_json:
        _print_value({"dry_run": False, **planned.summary(), "backfill": plan_row,
                      "request": done["request"], "inserted": done["inserted"],
                      "requeued": len(done["requeued"]), "left_alone": done["left_alone"]})
    else:
        _say(f"backfill {plan_row['id']} running (replay group {plan_row['replay_group_id']}): "
                   f"{done['inserted']} run(s) inserted, {len(done['requeued'])} queued again, "
                   f"{done['left_alone']} left alone; request {done['request']['id']} by "
                   f"{done['request']['who']}. Follow it: runner backfill show {plan_row['id']} --follow")


@backfill_app.command("list")
def backfill_list(
    job: Annotated[str | None, typer.Option(help="only this job's plans")] = None,
    status: Annotated[list[str] | None, typer.Option(help="only these statuses (repeatable)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100000, help="plans shown at most")] = 50,
    as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """The backfill plans, newest first, with their progress."""
    for s in status or []:
        if s not in PLAN_STATUSES:
            fail(f"--status must be one of {', '.join(PLAN_STATUSES)}; got {s!r}", 2)
    with _errors():
        _, conn = _open_ledger(database_url)
        plans = backfill.list_plans(conn, job, status, limit)
        conn.close()
    if as_json:
        _print_json(plans)
        return
    rows = [{**p, "range": f"{p['range_from'].isoformat()} .. {p['range_to'].isoformat()}",
             "done": f"{p['succeeded']}/{p['expected_runs']}",
             "rate": "" if p["rate"] is None else f"{p['rate']:g}/s"} for p in plans]
    _print_table("backfills", rows, ["id", "job_name", "status", "range", "done", "running", "queued",
                                     "failures", "concurrency", "rate", "verify_status", "pause_reason",
                                     "requested_by", "created_at"])


def _verify_line(plan: dict[str, Any]) -> str:
    status = plan["verify_status"]
    if status is None:
        return ("verification: pending (it runs when the plan completes)"
                if plan["status"] != "completed" else "verification: running or not recorded yet")
    if status == "not_configured":
        return "verification: the job has no verify check (not verified)"
    detail = plan["verify_detail"] or {}
    if "kinds" in detail:  # verification kinds (runner/verification.py)
        tally = (f"{detail.get('passing')} of {len(detail['kinds'])} kinds passed, at least "
                 f"{detail.get('min_passing')} required")
        if status == "passed":
            return f"verified: {tally}"
        bad = [k for k in detail["kinds"] if not k.get("passed")]
        shown = "; ".join(f"{k.get('name')} {k.get('outcome')}"
                          + (f": {k['detail']}" if k.get("detail") else "") for k in bad[:4])
        return f"NOT verified: {status} ({tally}; {shown})"
    checks = detail.get("checks", [])
    if status == "passed":
        return f"verified: every check passed ({_plural(len(checks), 'partition check')})"
    bad = [c for c in checks if c.get("outcome") != "passed"]
    shown = "; ".join(f"{c.get('partition')!r} {c.get('outcome')}"
                      + (f": {c['detail']}" if c.get("detail") else "") for c in bad[:5])
    return f"NOT verified: {status} ({shown})"


def _show_progress(progress: backfill.Progress) -> None:
    p = progress.plan
    _say(f"backfill {p['id']} of job {p['job_name']!r}: {p['status']}"
               + (f" ({p['pause_reason']})" if p["pause_reason"] else ""))
    _say(f"  range [{p['range_from'].isoformat()}, {p['range_to'].isoformat()})"
               + (f", partitions {', '.join(map(repr, p['partitions']))}" if p["partitions"] else "")
               + f"; replay group {p['replay_group_id']}, lane {p['lane']!r}")
    _say(f"  concurrency {p['concurrency']}, "
               + (f"rate {p['rate']:g}/s" if p["rate"] is not None else "rate unlimited")
               + (f", pause after {p['max_failures']} failure(s)" if p["max_failures"] is not None else "")
               + (f", pause when: {p['pause_when']} (every {p['pause_every']} s)" if p["pause_when"] else "")
               + (", forced" if p["force"] else "")
               + (", its runs queued again resume from their checkpoints" if p.get("resume") else ""))
    _say(f"  progress: {progress.done}/{progress.total} done ("
               + ", ".join(f"{k} {v}" for k, v in sorted(progress.counts.items())) + ")")
    _say(f"  requested by {p['requested_by']} at {p['created_at'].isoformat(timespec='seconds')}: "
               f"{p['reason']}")
    _say(f"  {_verify_line(p)}")
    kinds = (p["verify_detail"] or {}).get("kinds") if p["verify_status"] is not None else None
    if kinds:
        _print_table("verification kinds", kinds, ["kind", "name", "outcome", "expected", "observed",
                                                   "partitions", "detail"])
    if progress.failures:
        _print_table("failed and dead runs (newest first)", progress.failures,
                     ["id", "schedule_slot", "partition_key", "status", "attempt", "last_error"])


def _follow(conn: psycopg.Connection[Any], plan_id: int) -> backfill.Progress:
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    progress = backfill.show(conn, plan_id)
    with Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
             console=Console(stderr=True)) as bar:
        task = bar.add_task(f"backfill {plan_id}", total=progress.total)
        while True:
            counts = progress.counts
            bar.update(task, total=progress.total, completed=progress.done,
                       description=printable(f"backfill {plan_id} {progress.plan['status']}: running "
                                   f"{counts.get('running', 0)}, failed {counts.get('failed', 0)}, "
                                   f"dead {counts.get('dead', 0)}"))
            if progress.plan["status"] in ("completed", "cancelled", "paused"):
                return progress
            time.sleep(1.0)  # the display's refresh interval
            progress = backfill.show(conn, plan_id)


@backfill_app.command("show")
def backfill_show(
    plan_id: Annotated[int, typer.Argument(metavar="ID", help="the plan's id")],
    follow: Annotated[bool, typer.Option(
        help="draw a progress bar until the plan is completed, cancelled or paused")] = False,
    as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """One plan: its limits, progress, failures and verification."""
    with _errors():
        _, conn = _open_ledger(database_url)
        progress = _follow(conn, plan_id) if follow else backfill.show(conn, plan_id)
        conn.close()
    if as_json:
        _print_value(progress.as_dict())
    else:
        _show_progress(progress)


def _plan_action(plan_id: int, verb: str, reason: str, by: str | None, yes: bool, as_json: bool,
                 database_url: str | None, **extra: Any) -> None:
    """backfill pause|resume|cancel: the registry's backfill_VERB (its plan is the plan's
    progress, shown; its database function refuses a transition it does not allow)."""
    name = f"backfill_{verb}"
    params = _params(name, plan_id=plan_id, **extra)
    why = _reason(reason)
    with _errors():
        _, conn = _open_ledger(database_url)
        before: backfill.Progress = actions.plan(conn, name, params)
        if not as_json:
            _show_progress(before)
        _confirm(f"{verb.capitalize()} backfill {plan_id}?", yes)
        done = actions.act(conn, name, before, params, by, why)
        after = backfill.show(conn, plan_id)
        conn.close()
    if as_json:
        _print_value({**done, "plan": after.as_dict()})
        return
    note = f"; {done['runs_cancelled']} queued run(s) cancelled" if "runs_cancelled" in done else ""
    _say(f"backfill {plan_id} is {after.plan['status']}{note}; request {done['request']['id']} by "
               f"{done['request']['who']}")
    limit = after.plan["max_failures"]
    failures = after.counts.get("failed", 0) + after.counts.get("dead", 0)
    if verb == "resume" and limit is not None and failures > limit:
        _say(f"warning: {failures} failed or dead run(s) > max_failures={limit}: it pauses again "
                   "at the next pass unless resumed with a higher --max-failures", err=True)


@backfill_app.command("pause")
@_dispatches("backfill_pause")
def backfill_pause(
    plan_id: Annotated[int, typer.Argument(metavar="ID", help="the plan's id")],
    reason: ReasonOpt, by: ByOpt = None, yes: YesOpt = False, as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """Pause a plan: its queued runs wait; runs in flight finish. Audited."""
    _plan_action(plan_id, "pause", reason, by, yes, as_json, database_url)


@backfill_app.command("resume")
@_dispatches("backfill_resume")
def backfill_resume(
    plan_id: Annotated[int, typer.Argument(metavar="ID", help="the plan's id")],
    reason: ReasonOpt, by: ByOpt = None,
    max_failures: Annotated[int | None, typer.Option(
        min=0, help="a new failure threshold (the old one would pause it again)")] = None,
    yes: YesOpt = False, as_json: JsonOpt = False, database_url: DbOpt = None,
) -> None:
    """Resume a paused plan. Audited."""
    _plan_action(plan_id, "resume", reason, by, yes, as_json, database_url, max_failures=max_failures)


@backfill_app.command("cancel")
@_dispatches("backfill_cancel")
def backfill_cancel(
    plan_id: Annotated[int, typer.Argument(metavar="ID", help="the plan's id")],
    reason: ReasonOpt, by: ByOpt = None, yes: YesOpt = False, as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """Cancel a plan: its runs not started yet are cancelled (with the reason); runs in
    flight finish. Audited."""
    _plan_action(plan_id, "cancel", reason, by, yes, as_json, database_url)


@backfill_app.command("verify")
def backfill_verify(
    plan_id: Annotated[int, typer.Argument(metavar="ID", help="the plan's id")],
    reason: ReasonOpt, by: ByOpt = None, yes: YesOpt = False, as_json: JsonOpt = False,
    app_spec: AppOpt = None, database_url: DbOpt = None,
) -> None:
    """Run a completed plan's verify check again (needs --app) and record it. Audited."""
    why = _reason(reason)
    with _errors():
        runner_app = load_app(app_spec)
        _, conn = _open_ledger(database_url)
        before = backfill.show(conn, plan_id)
        job_def = runner_app.jobs.get(before.plan["job_name"])
        if job_def is None:
            raise ConfigError(f"the app {app_spec!r} defines no job {before.plan['job_name']!r}")
        if not as_json:
            _show_progress(before)
        _confirm(f"Verify backfill {plan_id} again?", yes)
        done = backfill.reverify(conn, plan_id, job_def, why, by)
        after = backfill.show(conn, plan_id)
        conn.close()
    if as_json:
        _print_value({**done, "plan": after.as_dict()})
    else:
        _say(f"{_verify_line(after.plan)}; request {done['request']['id']} by {done['request']['who']}")


def _decide(action: str, job: str, slot: str | None, range_from: str | None, range_to: str | None,
            partition: str | None, reason: str, by: str | None, yes: bool, as_json: bool,
            database_url: str | None) -> None:
    if slot is not None and (range_from is not None or range_to is not None):
        fail("give --slot or --from/--to, not both", 2)
    if (range_from is None) != (range_to is None):
        fail("--from and --to go together", 2)
    why = _reason(reason)
    params = _params(action, job=job, slot=slot, **{"from": range_from, "to": range_to}, partition=partition)
    with _errors():
        _, conn = _open_ledger(database_url)
        planned = actions.plan(conn, action, params)
        if not as_json:
            _print_table(f"awaiting approval: {planned.describe()}", planned.runs,
                         ["id", "schedule_slot", "partition_key", "trigger", "attempt", "status_reason"])
            _say("will set them pending (trigger manual), due now, each with a full budget of "
                       "attempts" if action == "approve" else "will record them skipped, with the reason")
        _confirm(f"{action.capitalize()} {_plural(len(planned.runs), 'run')} of job {job!r}?", yes)
        done = actions.act(conn, action, planned, params, by, why)
        conn.close()
    if as_json:
        _print_value({"action": action, "runs": done["runs"], "left_alone": done["left_alone"],
                      "request": done["request"]})
        return
    verb = "approved: pending, due now" if action == "approve" else "skipped"
    _say(f"{_plural(len(done['runs']), 'run')} {verb}; request {done['request']['id']} by "
               f"{done['request']['who']}"
               + (f"; {len(done['left_alone'])} left alone (no longer awaiting approval)"
                  if done["left_alone"] else ""))


SlotSel = Annotated[str | None, typer.Option("--slot", help="one slot (ISO 8601 with offset)")]
FromSel = Annotated[str | None, typer.Option("--from", help="slots at or after (ISO 8601 with offset)")]
ToSel = Annotated[str | None, typer.Option("--to", help="slots before (ISO 8601 with offset)")]
PartSel = Annotated[str | None, typer.Option("--partition", help="only this partition key")]


@app.command()
@_dispatches("approve")
def approve(
    job: Annotated[str, typer.Argument(help="the job's name")],
    reason: ReasonOpt, slot: SlotSel = None, range_from: FromSel = None, range_to: ToSel = None,
    partition: PartSel = None, by: ByOpt = None, yes: YesOpt = False, as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """Approve runs awaiting approval: each starts now (trigger manual). Audited."""
    _decide("approve", job, slot, range_from, range_to, partition, reason, by, yes, as_json, database_url)


@app.command()
@_dispatches("skip")
def skip(
    job: Annotated[str, typer.Argument(help="the job's name")],
    reason: ReasonOpt, slot: SlotSel = None, range_from: FromSel = None, range_to: ToSel = None,
    partition: PartSel = None, by: ByOpt = None, yes: YesOpt = False, as_json: JsonOpt = False,
    database_url: DbOpt = None,
) -> None:
    """Skip runs awaiting approval: recorded skipped, with the reason. Audited."""
    _decide("skip", job, slot, range_from, range_to, partition, reason, by, yes, as_json, database_url)


# == end of backfills and approvals =======================================================


# == the operator console (logic in runner/web/) ==========================================


@app.command()
def web(
    app_spec: AppOpt = None,
    database_url: DbOpt = None,
    read_database_url: Annotated[str | None, typer.Option(
        "--read-database-url", envvar="RUNNER_WEB_READ_DATABASE_URL",
        help="the pages read from this URL (e.g. a replica); actions always use --database-url")] = None,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port to listen on")] = 8080,
    unix_socket: Annotated[Path | None, typer.Option(
        help="listen on this Unix socket instead of --host/--port (for a reverse proxy on this "
             "machine; needed by --trust-proxy-header)")] = None,
    unix_socket_mode: Annotated[str, typer.Option(
        help="the socket's mode: 600 (this account only) or 660 (and its group, e.g. the proxy's)")] = "600",
    allowed_host: Annotated[list[str] | None, typer.Option(
        help="a Host name this console answers to (repeatable), besides localhost, 127.0.0.1, ::1 "
             "and --host; any other Host is refused (421)")] = None,
    token_file: Annotated[Path | None, typer.Option(
        help="tokens: lines NAME ROLE TOKEN (ROLE viewer or operator), or one bare operator token")] = None,
    trust_proxy_header: Annotated[str | None, typer.Option(
        help="take the user from this header set by a reverse proxy (e.g. X-Forwarded-User)")] = None,
    proxy_operator: Annotated[list[str] | None, typer.Option(
        help="a proxy user who may act (repeatable); other proxy users are viewers")] = None,
    open_reads: Annotated[bool, typer.Option(
        help="let anyone read the pages and GET /api/ without a credential (never actions)")] = False,
    secure_cookies: Annotated[bool, typer.Option(
        help="mark cookies Secure (behind a TLS-terminating proxy)")] = False,
    session_secret_file: Annotated[Path | None, typer.Option(
        help="the key that signs sessions, shared by every runner web process (mode 600, 32+ chars); "
             "or RUNNER_WEB_SESSION_SECRET; default: derived from the tokens")] = None,
    login_failures_per_client: Annotated[int, typer.Option(
        min=1, help="failed token checks a client may make per --login-window before 429")] = 10,
    login_failures_global: Annotated[int, typer.Option(
        min=1, help="failed token checks of all clients per --login-window before 429")] = 100,
    login_window: Annotated[int, typer.Option(
        min=1, help="seconds over which failed token checks count")] = 300,
    replay_lag_warning: Annotated[float, typer.Option(
        min=0, help="pages read from a replica warn when its replay is more than this many seconds "
                    "behind")] = 30.0,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING, ERROR")] = "INFO",
    shutdown_grace: Annotated[int, typer.Option(
        min=0, max=3600, help="on SIGTERM/SIGINT: seconds the requests in flight may take to finish "
                              "(no new connection is accepted meanwhile)")] = 10,
) -> None:
    """The operator console: pages and a JSON API over the ledger (runner/web/). SIGTERM or
    SIGINT: it stops listening, lets the requests in flight finish (--shutdown-grace), closes
    its pools and exits 0."""
    from dataclasses import replace

    from runner.web import app as web_app
    from runner.web.auth import AuthConfigError, credentials

    level = getattr(logging, log_level.upper(), None)
    if not isinstance(level, int):
        fail(f"--log-level must be one of DEBUG, INFO, WARNING, ERROR, got {log_level!r}", 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)

    def check(url: str) -> str | None:
        conn = _connect(DatabaseChoice(url, "web"))
        try:
            migrate.check_schema(conn, url)
            return migrate.privilege_warning(conn, "runner web", "operator")
        finally:
            conn.close()

    with _errors():
        try:
            creds = credentials(token_file, trust_proxy_header, tuple(proxy_operator or ()), open_reads,
                                secure_cookies, secret_file=session_secret_file)
            hosts = web_app.allowed_hosts(None if unix_socket else host, tuple(allowed_host or ()))
        except AuthConfigError as exc:
            raise ConfigError(str(exc)) from None
        if unix_socket_mode not in ("600", "660"):
            raise ConfigError(f"--unix-socket-mode must be 600 or 660, got {unix_socket_mode!r}")
        if creds.proxy_header and unix_socket is None:
            raise ConfigError("--trust-proxy-header needs --unix-socket: on a TCP port every local process "
                              "(and anyone who reaches the port) could send the header and be any user")
        runner_app = load_app(app_spec) if app_spec else None
        choice = _resolve_db(database_url)
        try:
            config = web_app.prepare(choice.url, read_database_url, creds, runner_app, check)
            listener = (web_app.unix_listener(str(unix_socket), int(unix_socket_mode, 8))
                        if unix_socket is not None else None)
        except AuthConfigError as exc:
            raise ConfigError(str(exc)) from None
        config = replace(config, login_failures_per_client=login_failures_per_client,
                                     login_failures_global=login_failures_global,
                                     login_window_seconds=float(login_window), allowed_hosts=hosts,
                                     replay_lag_warning=replay_lag_warning)
    log = logging.getLogger("runner.web")
    if config.privilege_warning:
        log.warning("privileged login: %s", config.privilege_warning)
    if not creds.can_anyone_act:
        log.warning("no operator credential configured: actions are off")
    if creds.secret_source == "tokens":
        log.info("sessions signed with a key derived from the tokens (set RUNNER_WEB_SESSION_SECRET or "
                 "--session-secret-file to choose it)")
    if unix_socket is None and host in web_app.WILDCARDS and not allowed_host:
        log.warning("--host %s: the console answers only to the Host names %s; give --allowed-host with "
                    "the names its clients use", host, ", ".join(config.allowed_hosts))
    if listener is not None:
        log.info("runner web on unix socket %s, mode %s (ledger %s)", unix_socket, unix_socket_mode,
                 redact(choice.url))
    else:
        log.info("runner web on http://%s:%s (ledger %s)", host, port, redact(choice.url))
    if not web_app.serve(web_app.create_app(config), host, port, log_level.lower(), shutdown_grace,
                         listener=listener):
        raise typer.Exit(3)  # the server never started: uvicorn has logged why
    log.info("runner web stopped")




def main() -> None:
    """``runner``: a usage error (a bad option value, a missing option, an unknown command) is
    one line on stderr and exit code 2, like every other error (one line, exit 1)."""
    # the click typer runs on (its own copy in typer >= 0.24, else click): its base exception
    click_exception: type[Exception] = next(
        c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")
    try:
        code = app(standalone_mode=False)
    except click_exception as failure:
        exc: Any = failure
        if type(exc).__name__ == "NoArgsIsHelpError":  # `runner` or `runner db` alone: the help
            exc.show()
        else:
            ctx = getattr(exc, "ctx", None)
            where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
            _say(f"runner: error: {' '.join(exc.format_message().split())}{where}", err=True)
        sys.exit(exc.exit_code)
    except typer.Abort:
        _say("runner: error: aborted; nothing written", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)




# -- lanes --------------------------------------------------------------------------------

lane_app = typer.Typer(help="Lanes: the workloads runner processes serve, and their fleet limits.",
                       no_args_is_help=True)
app.add_typer(lane_app, name="lane")


@lane_app.command("list")
def lane_list(as_json: JsonOpt = False, database_url: DbOpt = None) -> None:
    """The lanes by priority (rank, lower first), their fleet limits and runs."""
    with _errors():
        _, conn = _open_ledger(database_url)
        found = lanes.list_lanes(conn)
        conn.close()
    if as_json:
        _print_json(found)
        return
    rows = [{**r, "concurrency": "" if r["concurrency"] is None else r["concurrency"],
             "rate": "" if r["rate"] is None else f"{r['rate']:g}/s"} for r in found]
    _print_table("lanes", rows, ["lane", "rank", "concurrency", "rate", "running", "queued", "builtin",
                                 "description"])


@lane_app.command("set")
@_dispatches("lane_set")
def lane_set(
    name: Annotated[str, typer.Argument(metavar="NAME", help="the lane (a new name adds it)")],
    reason: ReasonOpt,
    rank: Annotated[int | None, typer.Option(
        min=0, max=1000, help="priority, lower first (realtime 0, correction 10, manual 20, bulk 30; "
                              "a new lane: 25)")] = None,
    concurrency: Annotated[str | None, typer.Option(
        help="its queued runs running at once across every process (none: no limit)")] = None,
    rate: Annotated[str | None, typer.Option(
        help="starts of its queued runs per second across every process (none: no limit)")] = None,
    description: Annotated[str | None, typer.Option(help="what the lane is for")] = None,
    by: ByOpt = None, as_json: JsonOpt = False, database_url: DbOpt = None,
) -> None:
    """Add a lane or change its rank and fleet limits. Audited (runner.requests)."""
    why = _reason(reason)
    params = _params("lane_set", lane=name, rank=rank, concurrency=concurrency, rate=rate,
                     description=description)
    with _errors():
        _, conn = _open_ledger(database_url)
        planned = actions.plan(conn, "lane_set", params)
        done = actions.act(conn, "lane_set", planned, params, by, why)["lane"]
        conn.close()
    if as_json:
        _print_value(done)
        return
    limits = (f"concurrency {'none' if done['concurrency'] is None else done['concurrency']}, "
              f"rate {'none' if done['rate'] is None else format(done['rate'], 'g') + '/s'}")
    _say(f"lane {done['lane']} {'added' if done['created'] else 'changed'}: rank {done['rank']}, {limits}; "
         f"request {done['request_id']}")


# -- a copied ledger (runner/actions/copies.py) ------------------------------------------------


@db_app.command("adopt")
@_dispatches("adopt")
def db_adopt(reason: ReasonOpt, by: ByOpt = None, yes: YesOpt = False, as_json: JsonOpt = False,
             database_url: DbOpt = None) -> None:
    """Adopt a copied ledger (restored into another database or cluster): its runners then run
    the backfill plans, catch-up, retries and takeovers they hold (runner/actions/copies.py), audited."""
    why = _reason(reason)
    params = _params("adopt")
    with _errors():
        _, conn = _open_ledger(database_url)
        plan: copies.AdoptPlan = actions.plan(conn, "adopt", params)
        if plan.refusal:
            fail(plan.refusal)
        if not as_json:
            _say(plan.copy["detail"])
            _say(f"runners will go on with {_plural(plan.plans_running, 'backfill plan')} not finished, "
                 f"{_plural(plan.runs_queued, 'run')} queued or failed and "
                 f"{_plural(plan.runs_running, 'run')} running (taken over where their owner is not "
                 f"here); {_plural(plan.instances, 'instance row')} of runners not connected here "
                 "will be marked stopped")
        _confirm("Adopt this copy as a ledger of its own?", yes)
        done = actions.act(conn, "adopt", plan, params, by, why)
        conn.close()
    if as_json:
        _print_value({**plan.shown(), **done})
    else:
        stopped = _plural(done["instances_stopped"], "instance row")
        _say(f"ledger adopted: database {plan.copy['database_name']} (oid {plan.copy['database_oid']}) of "
             f"cluster {plan.copy['system_identifier']}; {stopped} stopped; request "
             f"{done['request']['id']} by {done['request']['who']}")
