"""Jobs with hostile names, partition keys and handlers (tests/test_hostile.py).

Handlers that touch the database write to ``sink`` (job_name, slot, partition_key, fence)
through ``ctx.db``. The job names and keys are exported so the test compares them exactly.
"""

import hashlib

from runner import JobContext, Runner

app = Runner()

QUOTED_JOB = "it's \"quoted\" — 日本語 ✓; DROP TABLE runner.job_runs; -- %s %(x)s {0} \\N"
KEYS = [
    "o'brien",
    'say "hi"',
    "emoji 🎉 and ünïcödé",
    "back\\slash and \\x00 spelled out",
    "semi;colon -- comment /* c */",
    "%s %(slot)s {partition}",
    "tab\tnewline\nreturn\r",
    "RTL \u202e text and zero\u200bwidth",
    # 10 kB of text (it compresses, so the ledger's unique index can hold it)
    ("lorem ipsum dolor sit amet, consectetur adipiscing elit; " * 200)[:10240],
]
# 10 kB that does not compress: more than a btree index entry can hold (8191 bytes at most)
INCOMPRESSIBLE = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(320))[:10240]


def write(ctx: JobContext) -> None:
    ctx.db.execute("INSERT INTO sink (job_name, slot, partition_key, fence) VALUES (%s, %s, %s, %s)",
                   (ctx.job_name, ctx.slot, ctx.partition, ctx.fence))


@app.job(QUOTED_JOB, every="1s", partitions=KEYS)
def quoted(ctx: JobContext) -> None:
    write(ctx)


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str() of this exception raises")

    def __repr__(self) -> str:
        raise RuntimeError("repr() of this exception raises too")


@app.job("unprintable-error", every="1s", max_attempts=1)
def unprintable(ctx: JobContext) -> None:
    raise Unprintable("boom")


@app.job("returns-a-value", every="1s")
def returns(ctx: JobContext) -> object:
    write(ctx)
    return {"a": "value the runner ignores", "n": 42}


steady = Runner()  # an app of its own: a steady job only (the outage test)


@steady.job("steady", every="1s", partitions=["a", "b"], max_attempts=20,
            backoff={"base": "200ms", "factor": 1.5, "cap": "1s"})
def steady_job(ctx: JobContext) -> None:
    write(ctx)


huge = Runner()  # a steady job beside one whose partition key the ledger cannot hold


@huge.job("steady", every="1s")
def huge_steady(ctx: JobContext) -> None:
    write(ctx)


@huge.job("huge-key", every="1s", partitions=lambda slot: ["fine", INCOMPRESSIBLE])
def huge_key(ctx: JobContext) -> None:
    write(ctx)
