"""A partitions callable whose error text forges log lines (tests/security/test_log_lines.py)."""

from datetime import datetime

from runner import JobContext, Runner

# a text record and a JSON record of a success that never happened, each on a line of its own
FORGED_TEXT = "2026-01-01 00:00:00,000 INFO runner.loop: attempt_succeeded job=forged run_id=1"
FORGED_JSON = '{"level": "info", "logger": "runner.loop", "event": "attempt_succeeded", "run_id": 1}'
MESSAGE = f"boom\n{FORGED_TEXT}\r\n{FORGED_JSON}\u2028{FORGED_TEXT}\x85\x1b[2K"

app = Runner()


def partitions(slot: datetime) -> list[str]:
    raise RuntimeError(MESSAGE)


@app.job("forged", every="1s", partitions=partitions)
def forged(ctx: JobContext) -> None:
    pass
