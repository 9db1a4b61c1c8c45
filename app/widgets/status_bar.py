"""One line at the bottom: backend, model, adapter, approval policy, the live session
and its mode, and the running training job."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

if TYPE_CHECKING:
    from agents.workbench import Workbench

#: A model path longer than this shows as its last two folders: a local model's absolute
#: path would otherwise push the session's state off the end of the line.
MODEL_CHARS = 32


def short_model(model: str) -> str:
    from agents.backends.offline import model_label

    model = model_label(model)
    parts = [p for p in model.split("/") if p]
    if len(model) <= MODEL_CHARS or len(parts) <= 2:
        return model
    return "…/" + "/".join(parts[-2:])


class StatusBar(Static):
    backend: reactive[str] = reactive("no model")
    model: reactive[str] = reactive("")
    adapter: reactive[str] = reactive("")
    policy: reactive[str] = reactive("")
    session: reactive[str] = reactive("")
    mode: reactive[str] = reactive("")
    #: what the agent is doing right now (the block being sampled), while it lasts
    activity: reactive[str] = reactive("")
    job: reactive[str] = reactive("")

    def show_model(self, bench: Workbench, loading: str | None = None) -> None:
        """The model and adapter in use, why there is none, or the model's loading step."""
        self.policy = bench.settings.approval
        backend = bench.backend
        if backend is not None:
            self.backend, self.model = backend.name, backend.model
            self.adapter = backend.active_adapter or ""
        elif bench.model_problem is not None:
            self.backend = "no model"
        elif loading is not None:
            self.backend = f"loading model: {loading}"
        else:
            self.backend = "loading model…"

    def render(self) -> Text:
        line = Text()
        line.append(self.backend, style="bold")
        if self.model:
            line.append(f" {short_model(self.model)}")
        line.append(f" · adapter {self.adapter or 'none'}", style="dim")
        if self.policy:
            line.append(f" · approval {self.policy}")
        if self.session:
            line.append(f" · {self.session}", style="bold")
        if self.mode:
            line.append(f" · {self.mode}")
        if self.activity:
            line.append(f" · {self.activity}", style="italic")
        line.append(f" · {self.job or 'no training job'}", style="dim")
        return line
