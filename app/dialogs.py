"""The small modals the console's screens share: a yes/no question and the adapter picker
(with `pick_adapter_then`, which opens a screen for the adapter picked while the model is
free)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from agents.adapters import trained_on
from app.actions import ADAPTER_PICKER_ACTIONS, CONFIRM_ACTIONS, bindings
from app.shared import workbench
from storage import Adapter

if TYPE_CHECKING:
    from storage.views import Adapters


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; dismissed with True for yes."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = bindings(CONFIRM_ACTIONS)

    def __init__(self, question: str, detail: str = "") -> None:
        super().__init__()
        self.question = question
        self.detail = detail

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-dialog"):
            yield Static(Text(self.question, style="bold"), id="confirm-question")
            if self.detail:
                yield Static(Text(self.detail), id="confirm-detail")
        yield Footer()

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class AdapterPicker(ModalScreen[str | None]):
    """The registered adapters (read in a worker); enter picks one, escape none."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = bindings(ADAPTER_PICKER_ACTIONS)

    def __init__(
        self, store: Adapters, title: str, active: str | None = None, model: str | None = None
    ) -> None:
        """`model`: the weights in use; adapters trained on another model show, but
        cannot be picked."""
        super().__init__()
        self.store = store
        self.title_text = title
        self.active = active
        self.model = model
        self.adapters: list[Adapter] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="adapters-dialog") as dialog:
            dialog.border_title = self.title_text
            yield OptionList(id="adapters-list")
            yield Static("reading the adapters…", id="adapters-message")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#adapters-list", OptionList).focus()
        self.read_adapters()

    @work(thread=True, exclusive=True, exit_on_error=False, group="adapters",
          name="reading the adapters")  # fmt: skip
    def read_adapters(self) -> None:
        adapters = self.store.list_adapters()
        self.app.call_from_thread(self.show_adapters, adapters)

    def show_adapters(self, adapters: list[Adapter]) -> None:
        self.adapters = adapters
        options = self.query_one("#adapters-list", OptionList)
        options.clear_options()
        for adapter in adapters:
            line = Text(adapter.name, style="bold")
            if adapter.name == self.active:
                line.append("  (in use)", style="green")
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(adapter.created_at))
            detail = f"  {adapter.base_model} · {when}"
            if adapter.job_id is not None:
                detail += f" · job {adapter.job_id}"
            line.append(detail, style="dim")
            other = self.model is not None and not trained_on(adapter, self.model)
            if other:
                line.append("  another base model", style="italic")
            options.add_option(Option(line, id=adapter.name, disabled=other))
        message = self.query_one("#adapters-message", Static)
        if adapters:
            options.highlighted = 0
            message.update(Text("enter picks, escape cancels", style="dim"))
        else:
            message.update(
                Text(
                    "no adapters yet: train one (T), or `agent-console train sft`",
                    style="italic",
                )
            )

    @on(OptionList.OptionSelected, "#adapters-list")
    def picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_close(self) -> None:
        self.dismiss(None)


def pick_adapter_then(
    origin: Screen[None], title: str, screen: Callable[[str], Screen[None]]
) -> None:
    """The adapter picker; the adapter picked opens `screen(adapter)` if the model is free."""
    bench = workbench(origin)

    def picked(adapter: str | None) -> None:
        if adapter is None:
            return
        again = bench.adapter_busy()
        if again is not None:
            origin.notify(again, severity="warning", markup=False)
            return
        origin.app.push_screen(screen(adapter), reload)

    async def reload(_: object) -> None:
        # the sessions it ran are in the tree when it closes (they needed `r` before)
        await origin.app.run_action("app.refresh")

    origin.app.push_screen(AdapterPicker(bench.store, title, model=bench.model_name()), picked)
