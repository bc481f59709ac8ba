"""The app of tests/test_signals.py: handlers busy most of the time (some sleeping, some
computing and so holding the GIL, which switches the loop thread out between two bytecodes),
so that a signal lands while handlers run, while the loop waits, while its duties run.

Loading it creates the file named by RUNNER_TEST_SIGNAL_MARK: `runner start` installs its
signal handlers before it loads the app, so from then on a SIGTERM or SIGINT must stop it
cleanly (exit code 0, deregistered)."""

import faulthandler
import os
import random
import signal
import sys
import time
from pathlib import Path

from runner import JobContext, Runner

# threads take turns with the GIL every few microseconds, not every 5 ms: the loop thread is
# switched out (and finds a signal waiting when it is back) at many more of its bytecodes,
# those inside Event.wait() and Event.set() among them
sys.setswitchinterval(float(os.environ.get("RUNNER_TEST_SWITCH_INTERVAL", "0.00002")))

# SIGUSR1: every thread's stack to stderr (the test asks for it when a runner does not exit)
faulthandler.register(signal.SIGUSR1, all_threads=True)

if os.environ.get("RUNNER_TEST_SIGNAL_MARK"):
    Path(os.environ["RUNNER_TEST_SIGNAL_MARK"]).touch()

app = Runner()


@app.job("naps", every="1s", partitions=["a", "b", "c"])
def naps(ctx: JobContext) -> None:
    time.sleep(random.uniform(0.1, 0.8))  # the handler's work: waiting on something


@app.job("sums", every="1s", partitions=["a", "b"])
def sums(ctx: JobContext) -> None:
    end = time.monotonic() + random.uniform(0.02, 0.3)
    while time.monotonic() < end:  # the handler's work: computing, holding the GIL
        pass
