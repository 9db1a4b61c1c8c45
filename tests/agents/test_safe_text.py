"""Control characters in model text are shown escaped, never passed to a terminal: every
code point checked, and a log line with a traceback."""

from __future__ import annotations

import logging
import sys

from agents.safe_text import EscapingFormatter, escape_controls

#: The code points a terminal may act on: C0 (but tab and line break), DEL, C1.
CONTROLS = [c for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c not in (0x09, 0x0A)]


def test_every_c0_and_c1_control_is_escaped_and_every_other_code_point_kept() -> None:
    controls = set(CONTROLS)
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        expected = f"\\x{code:02x}" if code in controls else char
        assert escape_controls(char) == expected, hex(code)
        assert escape_controls(f"a{char}b") == f"a{expected}b", hex(code)
    # all of them at once: nothing a terminal acts on is left, the rest is untouched
    everything = "".join(map(chr, range(sys.maxunicode + 1)))
    escaped = escape_controls(everything)
    assert not controls & {ord(c) for c in escaped}
    assert escaped.replace("\\x", "").count("\t") == 1 and "\n" in escaped
    assert len(escaped) == len(everything) + 3 * len(CONTROLS)


def test_the_attacks_of_a_terminal_show_as_text() -> None:
    clipboard = "\x1b]52;c;b3duZWQ=\x07"  # OSC 52: set the clipboard
    title = "\x1b]0;owned\x1b\\"  # OSC 0: set the window title, ended by ST
    hidden = "\x1b[8mhidden\x9b0m"  # SGR 8 hides text; CSI as one C1 byte shows it again
    assert escape_controls(clipboard + title + hidden + "\rover\n\tnext") == (
        "\\x1b]52;c;b3duZWQ=\\x07\\x1b]0;owned\\x1b\\\\x1b[8mhidden\\x9b0m\\x0dover\n\tnext"
    )


def test_a_log_line_and_its_traceback_are_escaped() -> None:
    name = "notes\x1b]0;owned\x07.txt"
    try:
        raise FileNotFoundError(name)
    except FileNotFoundError:
        record = logging.LogRecord(
            "agents.workdir", logging.WARNING, __file__, 1, "left out: %s", (name,), sys.exc_info()
        )
    line = EscapingFormatter("%(levelname)s %(message)s").format(record)
    assert line.startswith("WARNING left out: notes\\x1b]0;owned\\x07.txt\nTraceback")
    assert line.endswith("FileNotFoundError: notes\\x1b]0;owned\\x07.txt")
    assert not set(line) & set(map(chr, CONTROLS))
