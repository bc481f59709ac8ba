"""The wheel a user installs, checked as a user would (issue 29, point 7).

    python scripts/wheel_check.py [--keep]

Builds the sdist, then the wheel from that sdist (``python -m build --no-isolation``: the
checkout's virtualenv has the build backend, no network needed for it), installs the wheel
into a new virtualenv outside the checkout (its dependencies from the package index, as
``pip install slot-runner`` would), and from that virtualenv alone, against a new database
on the server the PG* variables name (127.0.0.1:5432, user postgres unless set): ``runner db
upgrade``, ``runner start`` of a small app written beside it until a run has succeeded, then
``runner check``. Prints one line per step and ``wheel check: passed`` (exit 0), or the step
that failed with its output (exit 1). ``.ci/run`` runs it after the test suite.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent

APP = '''
from runner import Runner

app = Runner()


@app.job("wheel-hello", every="1s", grace="5s")
def hello(ctx):
    pass
'''


def step(what: str, cmd: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
         timeout: float = 600) -> subprocess.CompletedProcess[str]:
    began = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    print(f"wheel check: {what}: exit {done.returncode} in {time.monotonic() - began:.1f}s", flush=True)
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
        raise SystemExit(1)
    return done


def server_url(dbname: str) -> str:
    host = os.environ.get("PGHOST", "127.0.0.1")
    port = os.environ.get("PGPORT", "5432")
    user = os.environ.get("PGUSER", "postgres")
    return f"postgresql://{user}@{host}:{port}/{dbname}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the work directory and the database")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="runner-wheel-"))
    dbname = f"runner_wheel_{uuid.uuid4().hex[:8]}"
    admin = server_url("postgres")
    try:
        dist = work / "dist"
        step("build the sdist, then the wheel from it",
             [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)])
        [wheel] = dist.glob("slot_runner-*.whl")
        [sdist] = dist.glob("slot_runner-*.tar.gz")
        print(f"wheel check: built {sdist.name} and {wheel.name}", flush=True)
        venv = work / "venv"
        step("a new virtualenv outside the checkout", [sys.executable, "-m", "venv", str(venv)])
        step(f"pip install {wheel.name}", [str(venv / "bin" / "pip"), "install", "-q", str(wheel)])
        where = step("the installed package is the wheel's", [str(venv / "bin" / "python"), "-c",
                     "import runner, runner.sqlfiles as s; print(runner.__file__); print(s.sql_dir())"],
                     cwd=work)
        if str(ROOT) in where.stdout or str(venv) not in where.stdout:
            print(f"wheel check: the runner imported from {where.stdout!r}, not the wheel", file=sys.stderr)
            return 1
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update({"RUNNER_DATABASE_URL": server_url(dbname), "PATH": f"{venv / 'bin'}:{env.get('PATH', '')}"})
        runner = str(venv / "bin" / "runner")
        step("runner db upgrade", [runner, "db", "upgrade"], env=env, cwd=work)
        (work / "wheel_app.py").write_text(APP)
        log = (work / "start.log").open("w")
        proc = subprocess.Popen([runner, "start", "--app", "wheel_app.py:app", "--poll-interval", "0.2"],
                                env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            succeeded = 0
            while time.monotonic() < deadline and proc.poll() is None:
                with psycopg.connect(server_url(dbname), autocommit=True) as conn:
                    row = conn.execute("SELECT count(*) FROM runner.job_runs WHERE status = 'succeeded'").fetchone()
                succeeded = row[0] if row else 0
                if succeeded >= 2:
                    break
                time.sleep(0.2)  # polling the ledger for the condition, not waiting for an outcome blindly
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
            log.close()
        print(f"wheel check: runner start: {succeeded} run(s) succeeded, exit {code}", flush=True)
        if succeeded < 2 or code != 0:
            print((work / "start.log").read_text()[-4000:], file=sys.stderr)
            return 1
        step("runner check", [runner, "check"], env=env, cwd=work)
        print("wheel check: passed", flush=True)
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname)))


if __name__ == "__main__":
    sys.exit(main())
