"""The chat with the agent: the operator's messages and the agent's `tell_operator`
replies, above the input line."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.binding import BindingType
from textual.keys import REPLACED_KEYS, key_to_character
from textual.widgets import Input, RichLog

from agents.safe_text import escape_controls
from app.actions import CHAT_ACTIONS, bindings

#: A paste can be huge; the agent gets it whole (clipped by the runtime), the log a line.
SHOWN_CHARS = 2000


class ChatLog(RichLog):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, wrap=True, markup=False, highlight=False, max_lines=2000)

    def say(self, who: str, text: str, *, style: str = "") -> None:
        shown = text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + " […]"
        line = Text(f"{who}: ", style=f"bold {style}".strip())
        line.append(escape_controls(shown))
        self.write(line)


class ChatInput(Input):
    """The line the operator writes to the agent on.

    Its footer keys are the ones that work while it takes the letters (escape, ctrl+q):
    without them the footer would show only what is left of the screen's keys."""

    BINDINGS: ClassVar[list[BindingType]] = bindings(CHAT_ACTIONS)

    def check_consume_key(self, key: str, character: str | None) -> bool:
        # Textual gives no character for a few key names ("slash"), so the footer
        # would offer `/ Search` while `/` is typed into the line.
        if character is None and key in REPLACED_KEYS:
            character = key_to_character(REPLACED_KEYS[key])
        return super().check_consume_key(key, character)
