"""One line at the bottom: backend, model, adapter, approval policy, the live session
and its mode, and the running training job."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static


class StatusBar(Static):
    backend: reactive[str] = reactive("no model")
    model: reactive[str] = reactive("")
    adapter: reactive[str] = reactive("")
    policy: reactive[str] = reactive("")
    session: reactive[str] = reactive("")
    mode: reactive[str] = reactive("")
    job: reactive[str] = reactive("")

    def render(self) -> Text:
        line = Text()
        line.append(self.backend, style="bold")
        if self.model:
            line.append(f" {self.model}")
        line.append(f" · adapter {self.adapter or 'none'}", style="dim")
        if self.policy:
            line.append(f" · approval {self.policy}")
        if self.session:
            line.append(f" · {self.session}", style="bold")
        if self.mode:
            line.append(f" · {self.mode}")
        line.append(f" · {self.job or 'no training job'}", style="dim")
        return line
