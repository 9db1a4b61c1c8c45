"""The chat with the agent: the operator's messages and the agent's `tell_operator`
replies, above the input line."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import RichLog

#: A paste can be huge; the agent gets it whole (clipped by the runtime), the log a line.
SHOWN_CHARS = 2000


class ChatLog(RichLog):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, wrap=True, markup=False, highlight=False, max_lines=2000)

    def say(self, who: str, text: str, *, style: str = "") -> None:
        shown = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + " […]"
        line = Text(f"{who}: ", style=f"bold {style}".strip())
        line.append(shown)
        self.write(line)
