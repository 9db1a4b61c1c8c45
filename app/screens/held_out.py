"""A/B on a held-out set: the base model and an adapter, each alone on the same held-out
variants of the task families (same seeds), one session after another, with the share of
variants each solved and its 95% interval. The set and the runs are `training.ab`'s
(`held_out_variants`, `run_held_out`); the sessions stay in the store.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.coordinate import Coordinate
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.worker import Worker, WorkerState

from agents.batch import wilson
from app.actions import HELD_OUT_ACTIONS, bindings
from app.shared import report_failure, workbench
from training.ab import BASE, TUNED, run_held_out

if TYPE_CHECKING:
    from agents.runtime import Runtime
    from agents.tasks.families import Variant
    from agents.workbench import Workbench


def rate_text(name: str, results: list[bool]) -> Text:
    low, high = wilson(sum(results), len(results))
    text = Text.assemble((f"{name}  ", "bold"), f"{sum(results)}/{len(results)} solved")
    if results:
        text.append(f"  (95% CI {low * 100:.0f}-{high * 100:.0f}%)", style="dim")
    return text


@dataclass
class Row:
    variant: Variant
    results: dict[str, bool]


class HeldOutScreen(Screen[None]):
    """The held-out variants as rows, base and adapter as columns, filled as they run."""

    CSS_PATH = "compare.tcss"
    BINDINGS: ClassVar[list[BindingType]] = bindings(HELD_OUT_ACTIONS)

    def __init__(self, adapter: str, variants: list[Variant]) -> None:
        super().__init__()
        self.adapter = adapter
        self.variants = variants
        self.rows: list[Row] = [Row(v, {}) for v in variants]
        #: set while the set holds the model: the main screen starts no session meanwhile
        self.running = threading.Event()
        self.stopping = threading.Event()
        self.failed: str | None = None
        self.current: Runtime | None = None

    @property
    def bench(self) -> Workbench:
        return workbench(self)

    def compose(self) -> ComposeResult:
        yield Static(
            Text.assemble(
                ("A/B on a held-out set  ", "bold"),
                f"base model vs adapter {self.adapter} · {len(self.variants)} variants never taught",
            ),
            id="compare-title",
        )
        yield DataTable(id="held-out-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="compare-verdict")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("variant", "task", "base", f"adapter {self.adapter}")
        for row in self.rows:
            table.add_row(row.variant.task.name, row.variant.task.title, "…", "…")
        self.show_rates()
        self.running.set()
        self.bench.hold_model(self.running)
        self.run_set()

    # -- running ---------------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="held-out", name="held-out set")
    def run_set(self) -> None:
        def solved(index: int, key: str, result: bool) -> None:
            self.rows[index].results[key] = result
            self.app.call_from_thread(self.show_row, index)

        def running(runtime: Runtime | None) -> None:
            self.current = runtime

        try:
            run_held_out(
                self.bench,
                self.adapter,
                self.variants,
                stopping=self.stopping,
                solved=solved,
                running=running,
            )
        finally:
            self.running.clear()

    def show_row(self, index: int) -> None:
        if not self.is_attached:
            return
        row = self.rows[index]
        table = self.query_one(DataTable)
        for column, key in ((2, BASE), (3, TUNED)):
            if key in row.results:
                mark = Text("solved", style="bold green") if row.results[key] else Text("no")
                table.update_cell_at(Coordinate(index, column), mark)
        self.show_rates()

    def show_rates(self) -> None:
        base = [r.results[BASE] for r in self.rows if BASE in r.results]
        tuned = [r.results[TUNED] for r in self.rows if TUNED in r.results]
        text = rate_text("base model", base)
        text.append("\n")
        text.append_text(rate_text(f"adapter {self.adapter}", tuned))
        if self.failed:
            text.append(f"\nstopped: {self.failed}", style="bold red")
        elif not self.running.is_set() and len(tuned) == len(self.rows):
            text.append("\ndone: every session is in the store to label", style="dim")
        self.query_one("#compare-verdict", Static).update(text)

    @on(Worker.StateChanged)
    def worker_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "held-out":
            return
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            self.failed = str(event.worker.error)
            report_failure(self, event)
        if event.worker.is_finished and self.is_attached:
            self.show_rates()
            self.refresh_bindings()

    # -- keys ------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self.running.is_set() and not self.stopping.is_set()
        return True

    def action_stop(self) -> None:
        self.stop_all()
        self.refresh_bindings()

    def stop_all(self) -> None:
        """Stop the running session (it stays in the store, aborted) and run no more."""
        self.stopping.set()
        current = self.current
        if current is not None:
            current.stop()

    def action_back(self) -> None:
        self.stop_all()
        self.app.pop_screen()
