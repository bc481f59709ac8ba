"""A job whose partition key is hostile terminal text (tests/security/test_terminal_text.py)."""

from runner import JobContext, Runner

# an OSC title change, a cleared screen, fake colours, a carriage return and a newline that
# would start a forged line, BEL, a C1 CSI and a right-to-left override
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x1b[31mRED\r\nFAKE line\x9b31m\u202eevil\x1b[0m"

app = Runner()


@app.job("shown", every="1h", partitions=[HOSTILE], max_attempts=1)
def shown(ctx: JobContext) -> None:
    raise RuntimeError(HOSTILE)
