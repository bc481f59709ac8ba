"""A job that writes down its process's garbage collector settings (tests/test_worker.py):
the thresholds and how many objects are frozen, in ``gc_seen`` through ``ctx.db``."""

import gc

from runner import Runner

app = Runner()


@app.job("gc-probe", every="1s")
def probe(ctx):
    ctx.db.execute("INSERT INTO gc_seen (thresholds, frozen) VALUES (%s, %s)",
                   (list(gc.get_threshold()), gc.get_freeze_count()))
