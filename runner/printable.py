"""Text that is safe to show on a terminal or write as one line of a log.

Partition keys, job names, error messages, reasons, ``--by`` and ``pause_when`` are user
text: they may hold escape sequences (a changed window title, a cleared screen, fake
colours), carriage returns and newlines (a forged line below a real one), C1 controls
(``\\x9b`` is a CSI on many terminals) and bidirectional overrides (U+202E shows text
reversed). ``printable`` writes each such character as a visible escape (``\\x1b``,
``\\n``, ``\\u202e``) and leaves every other character as it is. Every human-facing line
of the CLI and every text log line goes through it; JSON output keeps the exact text.
"""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls; the line and paragraph separators; the bidirectional
# marks, embeddings, overrides and isolates
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control, separator and bidi character shown as an escape."""
    return _UNSAFE.sub(_escape, text)


def has_unsafe(text: str) -> bool:
    return _UNSAFE.search(text) is not None
