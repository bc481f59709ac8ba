"""A job that fails every second after one heartbeat, its error carrying markup and a database
URL with a password (tests/test_watch.py: tracebacks, the runners line, no_runner)."""

from runner import Runner

app = Runner()


def connect_upstream(url: str) -> None:
    raise RuntimeError(f"cannot reach {url} <script>alert('tb')</script>")


@app.job("boom", every="1s", max_attempts=1)
def boom(ctx):
    ctx.heartbeat(processed=3, failed=1)
    connect_upstream("postgresql://etl:s3cret-pw@db.internal/warehouse")
