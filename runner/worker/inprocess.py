"""The runner inside the application: ``app.running(...)`` instead of ``runner start``.

``runner start`` stays the main way to run jobs. An application that prefers to carry its
runner in its own process (a FastAPI or Starlette service, a worker of its own) opens one
with ``Runner.running``, as a context manager::

    with app.running(database_url, workers=4):
        serve_forever()

or as an async context manager, from an ASGI lifespan::

    @contextlib.asynccontextmanager
    async def lifespan(api):
        async with app.running(database_url):
            yield

Entering connects, checks the schema (the embedded database is migrated, as by the CLI),
syncs the job definitions, registers the runner in ``runner.instances`` and starts the loop
on a thread of its own ("runner-loop"); leaving stops it exactly as SIGTERM stops ``runner
start``: stop claiming, let running handlers finish for ``grace`` seconds, hand the rest over
to other processes, record the outcomes, release the locks, deregister. The async form does
both in a worker thread, so the application's event loop keeps serving meanwhile.

The options are those of ``runner start`` (``database_url``, ``workers``, ``max_inflight``,
``poll_interval``, ``grace``, ``async_workers``, ``metrics_port``), with the same defaults and
the same database resolution (the argument, else ``RUNNER_DATABASE_URL``, else
``DATABASE_URL``, else the embedded PostgreSQL); ``RUNNER_LOCK_NAMESPACE`` is read the same way.
What differs, on purpose:

* logging: the runner configures none. Its loggers (``runner.*``) propagate to whatever the
  application set up; ``--log-level`` and ``--log-format`` are the application's business;
* signals: none are installed. The application (or its server, e.g. uvicorn) owns SIGTERM
  and SIGINT, and stops the runner by leaving the context;
* metrics: ``runner.metrics.registry`` can be exposed by the application itself; with
  ``metrics_port`` a Prometheus endpoint is also served on that port, until the process exits.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from types import TracebackType
from typing import TYPE_CHECKING

from runner.settings import ConfigError, choose_database, lock_namespace, redact
from runner.store import migrate
from runner.worker.metrics import Metrics

if TYPE_CHECKING:
    from runner.model.jobs import JobSource
    from runner.worker.loop import Worker

log = logging.getLogger("runner.inprocess")

STOP_MARGIN = 30.0  # seconds beyond the grace that leaving waits for the loop thread


class InProcessRunner:
    """One runner running inside the application (module docstring). Enter it with ``with``
    or ``async with``; it can be entered once."""

    def __init__(self, app: JobSource, database_url: str | None = None, *, workers: int = 10,
                 max_inflight: int = 0, poll_interval: float = 1.0, grace: float = 30.0,
                 async_workers: int = 0, metrics_port: int | None = None) -> None:
        from runner.worker.loop import LoopConfig

        if not app.jobs:
            raise ConfigError("the app registers no jobs")
        if workers < 1 or max_inflight < 0 or async_workers < 0 or poll_interval <= 0 or grace < 0:
            raise ConfigError("workers must be >= 1; max_inflight, async_workers and grace >= 0; "
                              "poll_interval > 0")
        self.app = app
        self._database_url = database_url
        self.config = LoopConfig(workers=workers, max_inflight=max_inflight,
                                 poll_interval=poll_interval, grace=grace, async_workers=async_workers)
        self.metrics = Metrics()
        self._metrics_port = metrics_port
        self.worker: Worker | None = None
        self._thread: threading.Thread | None = None
        self._entered = False

    # -- start and stop -------------------------------------------------------------------

    def start(self) -> None:
        """Connect, check the schema, register and start the loop thread."""
        from runner.worker.loop import Worker, connect

        if self._entered:
            raise RuntimeError("this in-process runner was started already; make a new one")
        self._entered = True
        url = self._resolve_url()
        conn = connect(url, connect_timeout=10)
        try:
            migrate.check_schema(conn, url)
        finally:
            conn.close()
        if self._metrics_port is not None:
            try:
                self.metrics.serve(self._metrics_port)
            except OSError as exc:
                raise ConfigError(f"cannot serve metrics on port {self._metrics_port}: "
                                  f"{exc.strerror}") from None
        worker = Worker(self.app, url, self.config, namespace=lock_namespace(), metrics=self.metrics)
        worker.start()
        self.worker = worker
        self._thread = threading.Thread(target=self._run, name="runner-loop", daemon=True)
        self._thread.start()

    def _resolve_url(self) -> str:
        choice = choose_database(self._database_url)
        if choice is not None:
            return choice.url
        from runner.store.embedded import embedded_url

        log.warning("no database configured (database_url, RUNNER_DATABASE_URL, DATABASE_URL); "
                    "using the embedded PostgreSQL in ./.runner/")
        from runner.worker.loop import connect

        url = embedded_url()
        with connect(url) as check:
            if migrate.current_revision(check) != migrate.head_revision():
                log.warning("migrating the embedded database %s to head", redact(url))
                migrate.upgrade(url)
        return url

    def _run(self) -> None:
        assert self.worker is not None
        try:
            self.worker.run()
        except Exception:
            log.exception("the in-process runner's loop stopped on an error")

    def stop(self) -> None:
        """Stop as SIGTERM stops ``runner start``: stop claiming, ``grace`` seconds for running
        handlers, hand the rest over, record outcomes, deregister. Returns when done."""
        worker, thread = self.worker, self._thread
        if worker is None or thread is None:
            return
        worker.stop()
        thread.join(self.config.grace + STOP_MARGIN)
        if thread.is_alive():
            log.error("the in-process runner did not stop within %.0fs", self.config.grace + STOP_MARGIN)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the context manager protocols ----------------------------------------------------

    def __enter__(self) -> InProcessRunner:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> InProcessRunner:
        await asyncio.to_thread(self.start)
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        # shielded: a lifespan cancelled while the runner hands its runs over must still let
        # it finish (or the runs stay running until another process takes them over)
        stopping = asyncio.ensure_future(asyncio.to_thread(self.stop))
        try:
            await asyncio.shield(stopping)
        except asyncio.CancelledError:
            await stopping
            raise


