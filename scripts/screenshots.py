"""Screenshots of the operator console, for the docs: python scripts/screenshots.py

Seeds a demo ledger through the runner's own paths (runner.testing.run_once for a week of
history, a failure with its traceback, a slot left missing; `runner backfill` for two plans,
one paused; two real `runner start` processes for the live part), starts a real `runner web`
on it, logs in with its token in Debian's Chromium (Playwright) and saves one PNG per page in
--out (default docs/img/): the overview (Jobs), Runs, a dead run's page, a job's page and
definition, Runners, Alerts, a backfill, the job page's grid in dark mode and the overview 390 px
wide. Exits 1, naming them, if a page answered an HTTP error or logged a console error.

The ledger: --database-url (migrated to head here; give an empty database), or by default a
scratch database made on the server of --server-url (default RUNNER_TEST_DATABASE_URL, else
PGUSER@PGHOST:PGPORT, else postgres@127.0.0.1:5432; a password from PGPASSWORD or ~/.pgpass)
and dropped at the end. The runners log in as a worker and the console as an operator
(sql/roles.sql, under role names of this run, dropped at the end). With Pillow installed
(`pip install pillow`) each PNG is cut to a 128-colour palette, about a third of the size.
tests/test_screenshots.py runs this script.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import sql

from runner import JobContext, Runner

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
APP_SPEC = f"{HERE}:app"

# -- the demo app (imported by the `runner start` processes as APP_SPEC) ---------------------

TENANTS = ["acme", "globex", "initech", "umbrella"]
NOW = datetime.now(UTC)
# settlement's slots are at 02:00 in Seoul, 17:00 UTC: it is tracked from just before the
# oldest of the 7 slots the seed runs, import-orders from just before its 4 seeded hours
SETTLED_FROM = NOW.replace(hour=17, minute=0, second=0, microsecond=0) - timedelta(days=7, hours=1)
if SETTLED_FROM + timedelta(days=7, hours=1) > NOW:
    SETTLED_FROM -= timedelta(days=1)
IMPORTED_FROM = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=4, minutes=1)
FAILING: set[tuple[str, datetime]] = set()  # (tenant, slot) whose settlement fails: set by the seed only

app = Runner()


@app.job("settlement", cron="0 2 * * *", timezone="Asia/Seoul", partitions=TENANTS, owner="billing",
         max_attempts=3, backoff="1s", stale_after="2d", track_from=SETTLED_FROM)
def settlement(ctx: JobContext) -> None:
    entries = _entries(ctx.partition, ctx.slot)
    ctx.heartbeat(processed=len(entries))
    _balance(ctx.partition, ctx.business_date, entries)


@app.job("import-orders", every="1h", partitions=TENANTS[:3], owner="orders",
         track_from=IMPORTED_FROM)
def import_orders(ctx: JobContext) -> None:
    ctx.heartbeat(processed=len(ctx.partition) * 7)


@app.job("refresh-rates", every="10s", owner="pricing")
def refresh_rates(ctx: JobContext) -> None:
    ctx.heartbeat(processed=1)


def _entries(tenant: str, slot: datetime) -> list[int]:
    """The day's ledger entries in cents: pairs that cancel out, unless the seed says not."""
    amounts = [(slot.toordinal() * 31 + len(tenant) * i) % 9700 for i in range(20)]
    entries = [x for a in amounts for x in (a, -a)]
    return [*entries, 1240] if (tenant, slot) in FAILING else entries


def _balance(tenant: str, day: date, entries: list[int]) -> None:
    total = sum(entries)
    if total:
        raise ValueError(f"{tenant}: the ledger of {day} does not balance: debits exceed credits by {total / 100:.2f}")


# -- seeding --------------------------------------------------------------------------------


def seed(url: str) -> dict[str, Any]:
    """A week of history through run_once, then the runner's own commands for the rest."""
    from runner.testing import run_once

    now = datetime.now(UTC)
    settle = app.jobs["settlement"].schedule
    newest = settle.latest_at_or_before(now)
    days = [newest - timedelta(days=k) for k in range(1, 8)]  # the newest slot: the runners' own
    dead = days[1]
    FAILING.add(("globex", dead))
    for slot in reversed(days):
        for tenant in TENANTS:
            if tenant == "umbrella" and slot == days[3]:
                continue  # never started: the gap scan lists it
            run_once(app, "settlement", slot, url, partition=tenant,
                     attempts=3 if slot == dead and tenant == "globex" else 1)
    hourly = app.jobs["import-orders"].schedule.latest_at_or_before(now)
    for k in range(4, 0, -1):
        for tenant in TENANTS[:3]:
            run_once(app, "import-orders", hourly - timedelta(hours=k), url, partition=tenant)
    with psycopg.connect(url, autocommit=True) as conn:
        # run_once registers a short-lived runner per call: the demo's Runners page shows the
        # demo's runners, not the seeding's calls
        conn.execute("DELETE FROM runner.instances WHERE stopped_at IS NOT NULL")
        row = conn.execute("SELECT id FROM runner.job_runs WHERE status = 'dead'").fetchone()
    assert row is not None, "the seeded failure did not end dead"
    return {"dead": int(row[0]), "from": days[-1] - timedelta(days=10), "to": days[-1] - timedelta(days=3),
            "hourly_from": IMPORTED_FROM - timedelta(days=2), "hourly_to": IMPORTED_FROM - timedelta(days=1)}


def cli(url: str, *args: str) -> str:
    """One `runner ...` command on the demo ledger, in this process (the same Typer app: an
    interpreter's start-up is most of a command's time); its output. Exits 1 with its
    output if it fails."""
    from runner.cli import app as commands

    said = io.StringIO()
    before = os.environ.get("RUNNER_DATABASE_URL")
    os.environ["RUNNER_DATABASE_URL"] = url
    try:
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            commands(list(args), standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            sys.exit(f"screenshots: `runner {' '.join(args[:2])}` failed: {said.getvalue().strip()}")
    finally:
        if before is None:
            os.environ.pop("RUNNER_DATABASE_URL")
        else:
            os.environ["RUNNER_DATABASE_URL"] = before
    return said.getvalue()


def plans(url: str, seeded: dict[str, Any]) -> None:
    """Two backfill plans, as an operator makes them: one running slowly in lane bulk, one
    paused."""
    cli(url, "backfill", "create", "import-orders", "--from", seeded["hourly_from"].isoformat(),
        "--to", seeded["hourly_to"].isoformat(), "--rate", "0.5", "--app", APP_SPEC, "--yes", "--by", "dana",
        "--reason", "orders of the 3rd were re-exported by the shop")
    cli(url, "backfill", "create", "settlement", "--from", seeded["from"].isoformat(),
        "--to", seeded["to"].isoformat(), "--concurrency", "2", "--app", APP_SPEC, "--yes", "--by", "sam",
        "--reason", "re-settle the fortnight before the fee change")
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT max(id) FROM runner.backfills").fetchone()
    assert row is not None
    cli(url, "backfill", "pause", str(row[0]), "--yes", "--by", "sam", "--reason", "month-end freeze until Monday")
    seeded["plan"] = int(row[0])


# -- least privilege: the runners log in as workers, the console as an operator ------------

ROLE_KINDS = ("worker", "operator", "readonly", "condition")


@contextlib.contextmanager
def roles(url: str) -> Iterator[dict[str, str]]:
    """sql/roles.sql applied under group names of this run (roles are cluster-wide: a shared
    server's own runner_* roles are left alone), a login in the worker and in the operator
    group; their URLs. Dropped at the end."""
    tag = f"{os.getpid()}_{secrets.token_hex(3)}"
    groups = {kind: f"runner_{kind}_demo{tag}" for kind in ROLE_KINDS}
    logins = {kind: f"demo_{kind}_{tag}" for kind in ("worker", "operator")}
    password = secrets.token_hex(16)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            for kind, name in groups.items():
                conn.execute("SELECT set_config(%s, %s, false)", (f"runner.{kind}_role", name))
            conn.execute((ROOT / "sql" / "roles.sql").read_text())
            for kind, login in logins.items():
                conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                    sql.Identifier(login), sql.Literal(password), sql.Identifier(groups[kind])))
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        yield {kind: urlunsplit(parts._replace(netloc=f"{quote(login, safe='')}:{password}@{host}"))
               for kind, login in logins.items()}
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for name in [*logins.values(), *groups.values()]:
                if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
                    conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
                    conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


# -- processes ------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            sys.exit(f"screenshots: {what} not within {timeout:.0f} s")
        time.sleep(0.1)  # polling a condition, not waiting for an outcome


@contextlib.contextmanager
def processes(url: str, logins: dict[str, str], port: int, token: str, logs: Path) -> Iterator[None]:
    """Two `runner start` (one serving every lane, one the realtime lane only) and `runner
    web`, each in a process of its own, until both runners are registered and the console
    serves its login page."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNNER_WEB_")}
    env["RUNNER_WEB_TOKEN"] = token
    specs = {"runner-1": (logins["worker"], ["start", "--app", APP_SPEC]),
             "runner-2": (logins["worker"], ["start", "--app", APP_SPEC, "--lanes", "realtime"]),
             "web": (logins["operator"], ["web", "--port", str(port)])}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for name, (login, args) in specs.items():
            with (logs / f"{name}.log").open("w") as out:
                procs[name] = subprocess.Popen([sys.executable, "-m", "runner", *args], cwd=ROOT,
                                               env={**env, "RUNNER_DATABASE_URL": login},
                                               stdout=out, stderr=subprocess.STDOUT)

        def up() -> bool:
            for name, proc in procs.items():
                if proc.poll() is not None:
                    sys.exit(f"screenshots: {name} exited: {(logs / f'{name}.log').read_text()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=2):
                    pass
            except OSError:
                return False
            with psycopg.connect(url, autocommit=True) as conn:
                row = conn.execute("SELECT count(*) FROM runner.instances WHERE stopped_at IS NULL").fetchone()
            return row is not None and row[0] == 2

        wait_for(up, "two runners and the console")
        yield
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


# -- the browser ----------------------------------------------------------------------------

WIDE = {"width": 1280, "height": 760}
PHONE = {"width": 390, "height": 844}
LIGHT: dict[str, Any] = {"viewport": WIDE, "color_scheme": "light"}
DARK: dict[str, Any] = {"viewport": WIDE, "color_scheme": "dark"}
MOBILE: dict[str, Any] = {"viewport": PHONE, "color_scheme": "light", "is_mobile": True, "has_touch": True}


def pages(seeded: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(file, path, browser context) of each screenshot."""
    return [
        ("console-overview.png", "/", LIGHT),
        ("console-runs.png", "/runs", LIGHT),
        ("console-run.png", f"/runs/{seeded['dead']}#attempts", LIGHT),
        ("console-job.png", "/job?name=settlement", LIGHT),
        ("console-runners.png", "/runners", LIGHT),
        ("console-alerts.png", "/alerts", LIGHT),
        ("console-backfill.png", f"/backfills/{seeded['plan']}", LIGHT),
        ("console-dark.png", "/job?name=settlement#grid", DARK),
        ("console-mobile.png", "/", MOBILE),
    ]


def shoot(base: str, token: str, seeded: dict[str, Any], out: Path, chromium: str) -> list[str]:
    """Every screenshot, logged in once; the problems seen (HTTP errors, console errors)."""
    from playwright.sync_api import sync_playwright

    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run"])
        try:
            contexts: dict[int, Any] = {}
            state: Any = None
            for name, path, options in pages(seeded):
                context = contexts.get(id(options))
                if context is None:
                    context = browser.new_context(device_scale_factor=1, storage_state=state, **options)
                    contexts[id(options)] = context
                    page = context.new_page()
                    page.on("console", lambda m: problems.append(f"console {m.type}: {m.text} ({m.page.url})")
                            if m.type == "error" else None)
                    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
                    page.on("response", lambda r: problems.append(f"HTTP {r.status} {r.url}")
                            if r.status >= 400 else None)
                    if state is None:
                        page.goto(base + "/login")
                        page.fill("#token", token)
                        page.click("button[type=submit]")
                        page.wait_for_url(base + "/")
                        state = context.storage_state()
                page = context.pages[0]
                response = page.goto(base + path)
                if response is None or response.status != 200:
                    problems.append(f"{name}: {path} answered {response.status if response else 'nothing'}")
                if "#" in path:
                    # the part worth showing at the top, its heading above it in view
                    page.locator("#" + path.rpartition("#")[2]).evaluate(
                        "e => { e.scrollIntoView(); window.scrollBy(0, -70); }")
                page.screenshot(path=str(out / name))
                shrink(out / name)
            for context in contexts.values():
                context.close()
        finally:
            browser.close()
    return problems


def shrink(png: Path) -> None:
    """A 128-colour palette, when Pillow is installed (about a third of the size; the pages are
    flat colours and text): else the PNG stays as Chromium wrote it."""
    try:
        from PIL import Image
    except ImportError:
        return
    with Image.open(png) as image:
        small = image.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT,
                                              dither=Image.Dither.NONE)
    small.save(png, optimize=True)


# -- main -----------------------------------------------------------------------------------


@contextlib.contextmanager
def ledger(database_url: str | None, server_url: str | None) -> Iterator[str]:
    from runner.store import migrate
    from runner.testing import fresh_database

    if database_url:
        migrate.upgrade(database_url)
        yield database_url
        return
    if not server_url:
        server_url = os.environ.get("RUNNER_TEST_DATABASE_URL") or "postgresql://{}@{}:{}/postgres".format(
            quote(os.environ.get("PGUSER", "postgres"), safe=""), os.environ.get("PGHOST", "127.0.0.1"),
            os.environ.get("PGPORT", "5432"))
    with fresh_database(server_url) as url:
        yield url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--database-url", help="an empty database for the demo ledger (kept)")
    parser.add_argument("--server-url", help="where the scratch database is made (dropped at the end)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="where the PNGs go")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium binary")
    args = parser.parse_args(argv)
    if not Path(args.chromium).exists():
        sys.exit(f"screenshots: no Chromium at {args.chromium} (apt-get install -y chromium)")
    args.out.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    port = free_port()
    clock = time.monotonic()

    def phase(what: str) -> None:
        nonlocal clock
        print(f"screenshots: {what} in {time.monotonic() - clock:.1f} s", flush=True)
        clock = time.monotonic()

    with tempfile.TemporaryDirectory(prefix="runner-screenshots-") as tmp, \
            ledger(args.database_url, args.server_url) as url, roles(url) as logins:
        seeded = seed(url)
        plans(url, seeded)
        phase("demo ledger seeded")
        logs = Path(tmp)
        try:
            with processes(url, logins, port, token, logs):
                phase("two runners and the console started")
                problems = shoot(f"http://127.0.0.1:{port}", token, seeded, args.out, args.chromium)
                phase(f"{len(pages(seeded))} pages shot")
        except BaseException:
            for log in logs.iterdir():
                print(f"--- {log.name}\n{log.read_text()}", file=sys.stderr)
            raise
    for name, _, _ in pages(seeded):
        print(f"{args.out / name}: {(args.out / name).stat().st_size // 1024} KB")
    if problems:
        print("screenshots: problems:\n" + "\n".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
