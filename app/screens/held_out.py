"""A/B on a held-out set: the base model and an adapter, each alone on the same held-out
variants of the task families (same seeds), one session after another, with the share of
variants each solved and its 95% interval.

The variants are the first `PER_FAMILY` held-out seeds of every family
(`agents.families.split`): never one a teaching script was given. Sessions run with approval
`auto`, no memory and `TICKS` ticks, as `bench/learning.py` measures; they stay in the store.
"""

from __future__ import annotations

import random
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
from agents.families import Variant, family_names, split, variant
from app.actions import HELD_OUT_ACTIONS, bindings
from app.screens.compare import BASE, TUNED, PinnedAdapter
from storage import TraceStore

if TYPE_CHECKING:
    from agents.runtime import Runtime
    from app.console import ConsoleApp

#: held-out variants per family
PER_FAMILY = 3
#: ticks per session: does the agent solve it at its first try
TICKS = 1


def held_out_variants(per_family: int = PER_FAMILY) -> list[Variant]:
    """The first `per_family` held-out variants of each family, families in turn."""
    seeds = {family: split(family)[1][:per_family] for family in family_names()}
    return [variant(f, seeds[f][i]) for i in range(per_family) for f in seeds]


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

    def __init__(self, store: TraceStore, adapter: str, variants: list[Variant]) -> None:
        super().__init__()
        self.store = store
        self.adapter = adapter
        self.variants = variants
        self.rows: list[Row] = [Row(v, {}) for v in variants]
        #: set while the set holds the model: the main screen starts no session meanwhile
        self.running = threading.Event()
        self.stopping = threading.Event()
        self.failed: str | None = None
        self.current: Runtime | None = None

    @property
    def console(self) -> ConsoleApp:
        from app.console import ConsoleApp

        assert isinstance(self.app, ConsoleApp)
        return self.app

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
        self.console.comparison = self
        self.run_set()

    # -- running ---------------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="held-out", name="held-out set")
    def run_set(self) -> None:
        from agents.runtime import Runtime as Session
        from agents.runtime import session_solved
        from app.common import session_options

        try:
            console = self.console
            backend = console.backend
            if backend is None:
                raise RuntimeError(console.no_model_reason())
            if self.adapter not in backend.adapters():
                record = self.store.get_adapter(self.adapter)
                backend.load_adapter(self.adapter, record.path)
            lock = threading.Lock()
            seed = random.randrange(1 << 30)
            for index, row in enumerate(self.rows):
                for key, adapter in ((BASE, None), (TUNED, self.adapter)):
                    if self.stopping.is_set():
                        return
                    options = session_options(
                        console.settings,
                        backend,
                        row.variant.task,
                        approval="auto",
                        seed=seed + index,  # the same for both sides
                        memory=False,
                        max_ticks=TICKS,
                    )
                    runtime = Session(
                        self.store,
                        PinnedAdapter(backend, adapter, lock),
                        row.variant.task,
                        options,
                        sessions_dir=console.settings.sessions_dir(),
                    )
                    self.current = runtime
                    with console.sessions.running(runtime) as may_run:
                        outcome = runtime.run() if may_run else None
                    self.current = None
                    if outcome is None or self.stopping.is_set():  # cut short: not a result
                        return
                    row.results[key] = session_solved(self.store, outcome.session_id)
                    self.app.call_from_thread(self.show_row, index)
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
            self.console.report_failure(event)
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
