"""The tutorial (docs/tutorial/*.md) run as a newcomer would run it, so that it cannot rot.

Every fenced code block of a tutorial page carries a marker, an HTML comment on the last
non-blank line above it (invisible on the site and on GitHub); a block without one fails this
test, so nothing can be added to the tutorial that is not run:

* ``<!-- test: file NAME -->``: the block is a file the reader writes; it is written to NAME
  in the tutorial's directory (a fresh tmp dir).
* ``<!-- test: run -->``: a ``sh`` block, run by bash (``-e``) in that directory; it must exit
  0. ``<!-- test: run after CONDITION -->`` first waits (by condition, with a deadline) for
  CONDITION, one of ``CONDITIONS`` below: what the page tells the reader to wait for.
* ``<!-- test: background NAME -->``: a ``sh`` block of one command that keeps running (the
  reader's second or third terminal): started as a process of its own, then the test waits
  for ``READY[NAME]``. Stopped (SIGINT, as Ctrl-C) by a ``stop NAME`` block, or at the end.
* ``<!-- test: expect -->``: a ``text`` block of what the reader sees: matched against the
  output (stdout and stderr) of the block before it. ``<!-- test: stop NAME -->``: the same,
  against the whole output of background NAME once SIGINT made it exit 0.
* ``<!-- test: skip WHY -->``: not run, with the reason (``pip install`` is skipped: this
  suite's virtualenv has slot-runner and pytest installed, and its ``bin`` is first on the
  commands' PATH; naming one's own server is skipped: the test names its own database).

How expected lines match: box-drawing characters of the tables are dropped and runs of spaces
are one space, on both sides; ``...`` matches any text within a line; a time as the runner
prints it (``2026-12-03T19:12:00+00:00``, ``2026-12-03 19:12:00,013``, a date ``2026-12-03``)
matches any time or date. The lines must appear in order, other lines may come between (``expect``);
``expect exactly`` makes the lines between two ``...`` lines consecutive in the output.

The commands name their ledger in ``RUNNER_DATABASE_URL`` (a fresh database of the suite's
server; the reader may use the embedded server instead), and the console is started on a
free port: ``--port 8080`` and ``127.0.0.1:8080`` are replaced by that port.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, eventually, scalar

PAGES = sorted((ROOT / "docs" / "tutorial").glob("*.md"))
FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
MARKER = re.compile(r"<!--\s*test:\s*(.*?)\s*-->\s*$", re.S)
BOX = re.compile(r"[\u2500-\u257f]")
TIME_RE = r"\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d\d(?::?\d\d)?)?)?"  # a date, a time
TIME = re.compile(TIME_RE)


@dataclass
class Block:
    page: str
    line: int
    lang: str
    body: str
    kind: str
    arg: str

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip()
        line = text.count("\n", 0, m.start()) + 1
        mark = MARKER.search(before.rsplit("\n", 1)[-1]) if before else None
        if mark is None:
            raise AssertionError(f"{path.name}:{line}: a code block without a `<!-- test: ... -->` marker")
        kind, _, arg = mark.group(1).partition(" ")
        found.append(Block(path.name, line, m.group(1), m.group(2), kind, arg.strip()))
    return found


def normal(line: str) -> str:
    return " ".join(BOX.sub(" ", line).split())


def pattern(expected: str) -> re.Pattern[str]:
    """An expected line (normalised) as a regex: ``...`` any text, a time any time."""
    parts = []
    for piece in normal(expected).split("..."):
        out, last = [], 0
        for t in TIME.finditer(piece):
            out += [re.escape(piece[last:t.start()]), TIME_RE]
            last = t.end()
        out.append(re.escape(piece[last:]))
        parts.append("".join(out).replace(r"\ ", r"\s*"))
    return re.compile(r"\s*" + ".*".join(parts) + r"\s*")


def check_output(block: Block, output: str, exactly: bool) -> None:
    got = [n for n in (normal(line) for line in output.splitlines()) if n]
    expected = [normal(line) for line in block.body.splitlines()]
    expected = [e for e in expected if e]
    i = 0
    previous_gap = True
    for exp in expected:
        if exp == "...":
            previous_gap = True
            continue
        regex = pattern(exp)
        if exactly and not previous_gap:
            ok = i < len(got) and regex.fullmatch(got[i])
            if not ok:
                raise AssertionError(f"{block.where()}: expected next {exp!r}, got "
                                     f"{got[i] if i < len(got) else 'the end'!r}\n--- output:\n{output}")
            i += 1
        else:
            while i < len(got) and not regex.fullmatch(got[i]):
                i += 1
            if i == len(got):
                raise AssertionError(f"{block.where()}: {exp!r} not in the output (in order)\n--- output:\n{output}")
            i += 1
        previous_gap = False


# -- what the page tells the reader to wait for --------------------------------------------


@dataclass
class Tutorial:
    dir: Path
    url: str
    port: int
    env: dict[str, str]
    procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = field(default_factory=dict)


def _runner_ready(t: Tutorial) -> bool:
    """acme succeeded in a slot and globex is dead (retried once, given up)."""
    return bool(scalar(t.url, "SELECT count(*) FILTER (WHERE partition_key = 'acme' AND status = 'succeeded') > 0"
                              " AND count(*) FILTER (WHERE partition_key = 'globex' AND status = 'dead') > 0"
                              " FROM runner.job_runs WHERE job_name = 'import-orders'"))


def _web_ready(t: Tutorial) -> bool:
    proc, log = t.procs["web"]
    assert proc.poll() is None, log.read_text()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{t.port}/login", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def _reruns_done(t: Tutorial) -> bool:
    """No globex run left unfinished or dead, one succeeded on schedule (a slot after the file
    came) and one by the operator's rerun."""
    return bool(scalar(t.url, "SELECT count(*) FILTER (WHERE status NOT IN ('succeeded')) = 0"
                              " AND count(*) FILTER (WHERE trigger = 'schedule' AND status = 'succeeded') > 0"
                              " AND count(*) FILTER (WHERE trigger = 'manual' AND status = 'succeeded') > 0"
                              " FROM runner.job_runs WHERE job_name = 'import-orders' AND partition_key = 'globex'"
                              " AND schedule_slot < now() - interval '1 second'"))


def _two_dead(t: Tutorial) -> bool:
    """globex is dead in two slots at least (one to rerun alone, the others together)."""
    return bool(scalar(t.url, "SELECT count(*) >= 2 FROM runner.job_runs WHERE job_name = 'import-orders'"
                              " AND partition_key = 'globex' AND status = 'dead'"))


READY: dict[str, Callable[[Tutorial], bool]] = {"runner": _runner_ready, "web": _web_ready}
CONDITIONS: dict[str, Callable[[Tutorial], bool]] = {"two-dead": _two_dead, "reruns-done": _reruns_done}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local(text: str, port: int) -> str:
    return text.replace("--port 8080", f"--port {port}").replace("127.0.0.1:8080", f"127.0.0.1:{port}")


def _stop(proc: subprocess.Popen[bytes]) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise


@pytest.fixture
def tutorial(db_url: str, tmp_path: Path) -> Iterator[Tutorial]:
    work = tmp_path / "tutorial"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "RUNNER_WEB_", "COV_"))}
    env.update({"RUNNER_DATABASE_URL": db_url, "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
                "RUNNER_TEST_DATABASE_URL": os.environ["RUNNER_TEST_DATABASE_URL"]})
    env.pop("PYTHONPATH", None)  # the reader's app is found in their own directory
    t = Tutorial(work, db_url, free_port(), env)
    try:
        yield t
    finally:
        for proc, log in t.procs.values():
            if proc.poll() is None:
                _stop(proc)
            (tmp_path / f"{log.name}.kept").write_text(log.read_text())


def test_every_block_of_the_tutorial_is_marked() -> None:
    assert any(p.name == "index.md" for p in PAGES), "docs/tutorial/index.md is the tutorial's first page"
    kinds = {"file", "run", "background", "expect", "stop", "skip"}
    for page in PAGES:
        found = blocks(page)
        assert found, page
        for i, b in enumerate(found):
            assert b.kind in kinds, f"{b.where()}: unknown marker {b.kind!r} (one of {sorted(kinds)})"
            if b.kind in ("run", "background"):
                assert b.lang == "sh", f"{b.where()}: a {b.kind} block is ```sh"
            if b.kind == "skip":
                assert b.arg, f"{b.where()}: a skipped block says why"
            if b.kind == "expect":
                assert i > 0 and found[i - 1].kind in ("run", "background"), \
                    f"{b.where()}: an expect block follows a run or background block"
            if b.kind == "background":
                assert b.arg in READY and len(b.body.strip().splitlines()) == 1, b.where()
            if b.kind == "run" and b.arg:
                cond = b.arg.removeprefix("after ").strip()
                assert b.arg.startswith("after ") and cond in CONDITIONS, f"{b.where()}: run after one of {list(CONDITIONS)}"


@pytest.mark.slow  # real runner start / runner web processes for tens of seconds: scheduled first
def test_the_tutorial_runs_as_written(tutorial: Tutorial) -> None:
    t = tutorial
    output: Callable[[], str] = str  # the output of the block before: what an expect block reads
    started = time.monotonic()
    for page in PAGES:
        for b in blocks(page):
            if b.kind == "skip":
                continue
            if b.kind == "file":
                (t.dir / b.arg).write_text(b.body)
            elif b.kind == "run":
                if b.arg:
                    cond = CONDITIONS[b.arg.removeprefix("after ").strip()]
                    eventually(lambda cond=cond: cond(t), timeout=45, interval=0.2, message=f"{b.where()}: {b.arg}")
                done = subprocess.run(["bash", "-ec", _local(b.body, t.port)], cwd=t.dir, env=t.env,
                                      capture_output=True, text=True, timeout=120)
                said = done.stdout + done.stderr
                assert done.returncode == 0, f"{b.where()}: exit {done.returncode}\n{said}"
                output = lambda said=said: said  # noqa: E731
            elif b.kind == "background":
                log = t.dir.parent / f"{b.arg}.log"
                out = log.open("w")
                proc = subprocess.Popen(["bash", "-c", "exec " + _local(b.body.strip(), t.port)], cwd=t.dir,
                                        env=t.env, stdout=out, stderr=subprocess.STDOUT)
                out.close()
                t.procs[b.arg] = (proc, log)
                eventually(lambda name=b.arg: READY[name](t), timeout=60, interval=0.2,
                           message=f"{b.where()}: {b.arg} ready")
                output = log.read_text  # still being written: an expect block waits for its lines
                if b.arg == "web":
                    _the_console_shows_the_failure(t)
            elif b.kind == "expect":
                want = replace(b, body=_local(b.body, t.port))
                eventually(lambda want=want, output=output: check_output(want, output(), want.arg == "exactly") or True,
                           timeout=10, interval=0.2, message=f"{b.where()}: the expected output")
            elif b.kind == "stop":
                proc, log = t.procs[b.arg]
                assert _stop(proc) == 0, log.read_text()
                check_output(b, log.read_text(), exactly=False)
    for name, (proc, _) in t.procs.items():
        assert proc.poll() is not None, f"the tutorial never stops {name}"
    elapsed = time.monotonic() - started
    print(f"the tutorial ran in {elapsed:.1f} s")


def _the_console_shows_the_failure(t: Tutorial) -> None:
    """What the page says the reader will find in the console, through its API with the token
    of the file the reader made."""
    name, role, token = (t.dir / "web-tokens.txt").read_text().split()
    assert (name, role) == ("me", "operator")

    def get(path: str) -> Any:
        req = urllib.request.Request(f"http://127.0.0.1:{t.port}{path}",
                                     headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.read().decode()

    assert '"me"' in get("/api/whoami")
    alerts = get("/api/alerts")
    assert '"dead"' in alerts and "import-orders" in alerts and "globex" in alerts
    assert "import-orders" in get("/api/jobs")
    assert '"pid"' in get("/api/runners")


def test_the_matcher_fails_on_what_the_reader_would_not_see() -> None:
    """The expected-output rules above, each on both sides (so a wrong page fails the test)."""
    table = ("runs\n┏━━━━┳━━━━━━━━┓\n┃ id ┃ status ┃\n┡━━━━╇━━━━━━━━┩\n│ 7  │ dead   │\n"
             "└────┴────────┘\nledger audit: no violations\n")

    def ok(body: str, output: str, exactly: bool = False) -> bool:
        try:
            check_output(Block("t.md", 1, "text", body, "expect", ""), output, exactly)
        except AssertionError:
            return False
        return True

    assert ok("┃ id ┃ status ┃\n│ ... │ dead │", table)
    assert not ok("┃ id ┃ status ┃\n│ ... │ succeeded │", table)           # another status
    assert not ok("ledger audit: no violations\nruns", table)                # out of order
    assert ok("runs\n┃ id ┃ status ┃\nledger audit: no violations", table)  # lines between
    assert not ok("runs\n┃ id ┃ status ┃\nledger audit: no violations", table, exactly=True)
    assert ok("runs\n┃ id ┃ status ┃\n...\nledger audit: no violations", table, exactly=True)
    assert ok("... INFO x: at 2026-12-03T19:12:00+00:00", "2026-12-04 01:02:03,456 INFO x: at 2027-01-01T00:00:10+00:00")
    assert not ok("... INFO x: at 2026-12-03T19:12:00+00:00", "2026-12-04 01:02:03,456 INFO x: at soon")
    assert ok("business date 2026-12-03", "business date 2027-02-28")
    assert not ok("business date 2026-12-03", "business date 12/03/2026")
