"""Text cut to fit a line of the console (its control characters shown escaped: it may
be the model's)."""

from __future__ import annotations

from agents.safe_text import escape_controls


def fit(text: str, width: int) -> str:
    """`text`, ended with "…" where it is longer than `width`."""
    text = escape_controls(text)
    return text if len(text) <= width else text[: width - 1] + "…"


def first_line(text: str, width: int = 60) -> str:
    """The first line of `text` that is not blank, stripped and fitted to `width`."""
    for line in text.splitlines():
        if line.strip():
            return fit(line.strip(), width)
    return ""


def one_line(text: str, width: int = 100) -> str:
    """All of `text` on one line (runs of white space made one space), fitted to `width`."""
    return fit(" ".join(text.split()), width)
