"""The keys of the screen underneath, with what each does and the id to remap it by."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Static

from app.actions import HELP_ACTIONS, bindings


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = bindings(HELP_ACTIONS)

    def __init__(self, under: Screen[Any]) -> None:
        super().__init__()
        self.under = under

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-body"):
            yield Static(self.key_table(), id="help-keys")
        yield Footer()

    def key_table(self) -> Table:
        table = Table(title="Keys", expand=True, show_edge=False)
        table.add_column("key", style="bold", no_wrap=True)
        table.add_column("does")
        table.add_column("id (remap in the keys setting)", style="dim", no_wrap=True)
        seen: set[tuple[str, str]] = set()
        rows: list[tuple[str, str, str]] = []
        for key, active in self.under.active_bindings.items():
            binding = active.binding
            what = binding.tooltip or binding.description or binding.action
            if (binding.action, key) in seen or not what:
                continue
            seen.add((binding.action, key))
            shown = self.app.get_key_display(binding)
            rows.append((shown, what, binding.id or ""))
        for shown, what, binding_id in sorted(rows, key=lambda r: (r[2] == "", r[2], r[0])):
            table.add_row(Text(shown), Text(what), Text(binding_id))
        table.caption = "ctrl+p opens the command palette"
        return table

    def action_close(self) -> None:
        self.dismiss(None)
