"""One line at the bottom: backend, model, adapter, approval policy, the live session
and its mode, and the running training job."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

if TYPE_CHECKING:
    from agents.workbench import Workbench

#: A model path longer than this shows as its last two folders: a local model's absolute
#: path would otherwise push the session's state off the end of the line.
MODEL_CHARS = 32
#: The status bar's parts it never drops for width: the session and its mode.
KEPT = 9


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
        """The parts that fit the width: the session and its mode (which says when a
        decision waits) always; the rest, least needed first, only while there is room."""
        adapter = f" · adapter {self.adapter or 'none'}"
        parts: list[tuple[str, str, int]] = [  # (text, style, rank: lowest goes first)
            (self.backend, "bold", 4),
            (f" {short_model(self.model)}" if self.model else "", "", 1),
            (adapter, "dim", 5 if self.adapter else 1),
            (f" · approval {self.policy}" if self.policy else "", "", 2),
            (f" · {self.session}" if self.session else "", "bold", KEPT),
            (f" · {self.mode}" if self.mode else "", "", KEPT),
            (f" · {self.activity}" if self.activity else "", "italic", 3),
            (f" · {self.job or 'no training job'}", "dim", 0),
        ]
        width = self.size.width or sys.maxsize
        kept = [part for part in parts if part[0]]
        for dropped in sorted((p for p in kept if p[2] < KEPT), key=lambda p: p[2]):
            if sum(len(p[0]) for p in kept) <= width:
                break
            kept.remove(dropped)
        line = Text()
        for text, style, _ in kept:
            line.append(text.removeprefix(" · ") if not line else text, style=style)
        return line
