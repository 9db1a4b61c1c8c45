"""Text the model wrote, made safe to write to a terminal or a log.

A terminal acts on the control characters it is sent: OSC 52 sets the clipboard, OSC 0
the window title, SGR 8 hides what follows, a carriage return lets a line overwrite the
one before. The model writes `tell_operator` texts, its final message, file names,
exception messages and evaluation titles, so every C0 control but the line break and the
tab, DEL and every C1 control is shown as an escape (`\\x1b`, `\\x9b`) wherever such text
reaches a terminal or a log: the operator sees that something was there and the terminal
acts on nothing. The store keeps the text as written (training data must be exact): this
is for showing it only.
"""

from __future__ import annotations

import logging
import re

#: What `str.translate` makes of each control character it must not pass on.
_ESCAPES = {
    code: f"\\x{code:02x}"
    for code in (*range(0x20), 0x7F, *range(0x80, 0xA0))
    if code not in (0x09, 0x0A)  # tab, line break
}
#: Any of them: a search is many times quicker than `translate` over text that has none.
_ANY_CONTROL = re.compile("[" + re.escape("".join(map(chr, _ESCAPES))) + "]")


def escape_controls(text: str) -> str:
    """`text` with every C0 control but tab and line break, DEL and every C1 control
    written as a visible `\\xNN` escape."""
    if _ANY_CONTROL.search(text) is None:
        return text
    return text.translate(_ESCAPES)


class EscapingFormatter(logging.Formatter):
    """A log line (its traceback too) with controls escaped: log messages carry model
    text (file names, exception messages) into a terminal or a file a terminal shows."""

    def format(self, record: logging.LogRecord) -> str:
        return escape_controls(super().format(record))


def escape_logs_without_handlers() -> None:
    """Records no handler takes go to Python's handler of last resort (stderr, warnings
    and worse): give it the escaping formatter. `--query`, the console and the commands
    configure no handler of their own, so this is where their warnings are written."""
    last_resort = logging.lastResort
    if last_resort is not None and not isinstance(last_resort.formatter, EscapingFormatter):
        last_resort.setFormatter(EscapingFormatter())
