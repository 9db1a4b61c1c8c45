"""What code returned, made readable: a callback's value (a test run's stdout and stderr
with real line breaks, not a dict's repr), a one-line preview of it for a table row, and
long text cut to a few lines with a note of how many were left out.

Only the console's rendering: the outcome block's text, which the model reads, stays as
the runtime wrote it.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from agents.safe_text import escape_controls
from app.text import fit

STREAMS = ("stdout", "stderr")
#: A check's whole text under the table is cut to this many lines.
DETAIL_LINES = 20
#: ...keeping this many of its first lines (the rest from its end, where a test run
#: and a traceback say what went wrong).
DETAIL_HEAD = 5
#: The runtime's row text starts with the value's repr when it was not a string.
_REPR_OPENERS = ("{", "[", "(", "'", '"')


def _json(value: Any) -> str:
    try:
        return json.dumps(value, default=str, ensure_ascii=False)
    except (TypeError, ValueError):
        return repr(value)


def readable(value: Any) -> str:
    """A stored result as text: a string as itself, a dict with stdout or stderr as its
    other fields then each stream under its name, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and any(isinstance(value.get(k), str) for k in STREAMS):
        lines = [f"{key}: {_json(v)}" for key, v in value.items() if key not in STREAMS]
        for key in STREAMS:
            stream = value.get(key)
            if isinstance(stream, str) and stream.strip():
                lines.append(f"{key}:")
                lines.extend(stream.rstrip().splitlines())
        return "\n".join(lines)
    return _json(value)


def readable_row(text: str) -> str:
    """An outcome row's text (the value, or its repr, then any "stdout: " and "stderr: "
    lines) with the repr of a string or of a stdout/stderr dict turned back into text.
    A repr the runtime cut short no longer parses: its escaped line breaks are made real."""
    lines = text.split("\n")
    streams = next(
        (i for i, line in enumerate(lines) if line.startswith(("stdout: ", "stderr: "))),
        len(lines),
    )
    value_text, rest = "\n".join(lines[:streams]), lines[streams:]
    try:
        value = ast.literal_eval(value_text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        if value_text.startswith(_REPR_OPENERS) and "\\n" in value_text:
            value_text = value_text.replace("\\n", "\n").replace("\\t", "\t")
    else:
        if isinstance(value, str) or (
            isinstance(value, dict) and any(isinstance(value.get(k), str) for k in STREAMS)
        ):
            value_text = readable(value)
    return escape_controls("\n".join([value_text, *rest]))


def preview(text: str, width: int, *, last: bool = False) -> str:
    """One line standing for `text`: its first line that is not blank (or its last: an
    exception's own line ends a traceback), and how many more there are."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    more = f" (+{len(lines) - 1} lines)" if len(lines) > 1 else ""
    return fit(lines[-1] if last else lines[0], max(width - len(more), 8)) + more


def capped_lines(text: str, limit: int = DETAIL_LINES) -> list[str]:
    """The lines of `text`; past `limit`, its first and last ones around a note of how
    many were left out."""
    lines = escape_controls(text).rstrip().splitlines()
    if len(lines) <= limit:
        return lines
    tail = limit - DETAIL_HEAD
    left_out = len(lines) - limit
    return [*lines[:DETAIL_HEAD], f"… {left_out} more lines", *lines[-tail:]]
