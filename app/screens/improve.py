"""The improvement screen: the runs of `agent-console improve`, newest first; the
highlighted run's held-out pass rate per round as a plot, and each round's steps. `p`
promotes the highlighted round's adapter by hand: the run goes on with it from its next
round (or `--resume`), and the console samples with it now.

A run usually goes on in another process: the store is all the two share, so the screen
reads it again in a thread worker, once a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.worker import Worker

from app.actions import IMPROVE_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from app.messages import UseAdapter
from app.shared import report_failure
from training.improve import BASE, SideFigures, promote_by_hand, trained_adapter

if TYPE_CHECKING:
    from storage import Improvement
    from storage.views import Improvements

POLL_EVERY = 1.0
#: Cells of a pass rate's bar in the plot.
BAR = 20
RUN_COLUMNS = ("run", "family", "status", "rounds", "in use")
ROUND_COLUMNS = ("round", "solved", "labels", "trained", "held-out", "verdict")


class ImproveCommands(ScreenCommands):
    ENTRIES = palette(IMPROVE_ACTIONS)


def rate_bar(figures: SideFigures) -> Text:
    """`▕██████░░░░░░░░░░░░░░▏ 0.30 (0.11-0.60)`: the rate as a bar, the interval as
    figures (a bar reads without colour)."""
    filled = round(figures.rate * BAR)
    low, high = figures.interval
    return Text.assemble(
        "▕", ("█" * filled, "bold"), ("░" * (BAR - filled), "dim"), "▏",
        f" {figures.rate:.2f} ({low:.2f}-{high:.2f}) {figures.passed}/{figures.n}",
    )  # fmt: skip


def plot(run: Improvement) -> Text:
    """Each round's adapter on the held-out variants, under the base model's figures."""
    text = Text("held-out pass rate by round\n", style="bold")
    measured = run.state.get("held_out", {})
    if "passed" in measured.get(BASE, {}):
        text.append("base     ")
        text.append_text(rate_bar(SideFigures(**measured[BASE])))
        text.append("\n")
    shown = False
    for this in run.state.get("rounds", []):
        figures = this.get("evaluate") or {}
        text.append(f"round {this['round']:<3}")
        if "candidate" not in figures:
            text.append(f"{this.get('train', {}).get('skipped', 'not measured yet')}\n", "dim")
            continue
        shown = True
        candidate = SideFigures(**figures["candidate"])
        text.append_text(rate_bar(candidate))
        promoted = this.get("verdict") == "promoted" or this.get("promoted_by_hand")
        text.append(f"  {candidate.adapter}{' ✔ promoted' if promoted else ''}\n")
    if not shown and not run.state.get("rounds"):
        text.append("no round has finished a step yet\n", style="dim")
    return text


def round_row(this: dict[str, Any]) -> tuple[str, ...]:
    rollouts = this.get("rollouts", {})
    labels = this.get("labels")
    train = this.get("train", {})
    figures = this.get("evaluate") or {}
    return (
        str(this["round"]),
        f"{rollouts['solved']}/{rollouts['n']}" if rollouts else "…",
        f"+{labels['good']} -{labels['bad']}" if labels else "…",
        trained_adapter(this) or ("-" if "skipped" in train else "…"),
        SideFigures(**figures["candidate"]).line() if "candidate" in figures else "-",
        this.get("verdict", "…") + (" · promoted by hand" if this.get("promoted_by_hand") else ""),
    )


class ImproveScreen(Screen[None]):
    CSS_PATH = "improve.tcss"
    COMMANDS: ClassVar = {ImproveCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(IMPROVE_ACTIONS)

    def __init__(self, store: Improvements) -> None:
        super().__init__()
        self.store = store
        self.runs: list[Improvement] = []

    def compose(self) -> ComposeResult:
        runs: DataTable[str] = DataTable(id="improve-runs", cursor_type="row")
        runs.border_title = "improvement runs"
        yield runs
        yield Static(id="improve-plot")
        rounds: DataTable[str] = DataTable(id="improve-rounds", cursor_type="row")
        rounds.border_title = "rounds"
        yield rounds
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#improve-runs", DataTable).add_columns(*RUN_COLUMNS)
        self.query_one("#improve-rounds", DataTable).add_columns(*ROUND_COLUMNS)
        self.query_one("#improve-runs", DataTable).focus()
        self.load()
        self.set_interval(POLL_EVERY, self.load)

    @work(thread=True, exclusive=True, exit_on_error=False, group="improve", name="reading runs")
    def load(self) -> None:
        runs = self.store.list_improvements()
        self.app.call_from_thread(self.show_runs, runs)

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        report_failure(self, event)

    @property
    def selected(self) -> Improvement | None:
        table = self.query_one("#improve-runs", DataTable)
        if not self.runs or table.cursor_row < 0 or table.cursor_row >= len(self.runs):
            return None
        return self.runs[table.cursor_row]

    def show_runs(self, runs: list[Improvement]) -> None:
        if not self.is_attached:
            return
        table = self.query_one("#improve-runs", DataTable)
        row = table.cursor_row
        self.runs = runs
        table.clear()
        for run in runs:
            table.add_row(str(run.id), run.family, run.status,
                          f"{len(run.state.get('rounds', []))}/{run.config.get('rounds', '?')}",
                          run.state.get("adapter") or BASE)  # fmt: skip
        if runs:
            table.move_cursor(row=min(max(row, 0), len(runs) - 1), animate=False)
        self.show_run()

    @on(DataTable.RowHighlighted, "#improve-runs")
    def run_highlighted(self) -> None:
        self.show_run()

    def show_run(self) -> None:
        run = self.selected
        plot_view = self.query_one("#improve-plot", Static)
        rounds = self.query_one("#improve-rounds", DataTable)
        row = rounds.cursor_row
        rounds.clear()
        if run is None:
            plot_view.update(
                Text("no improvement runs yet: agent-console improve --family NAME", "dim")
            )
            return
        plot_view.update(plot(run))
        for this in run.state.get("rounds", []):
            rounds.add_row(*round_row(this))
        if rounds.row_count:
            rounds.move_cursor(row=min(max(row, 0), rounds.row_count - 1), animate=False)

    def action_promote(self) -> None:
        run = self.selected
        table = self.query_one("#improve-rounds", DataTable)
        rounds = run.state.get("rounds", []) if run is not None else []
        if run is None or not 0 <= table.cursor_row < len(rounds):
            self.notify("highlight a round in the rounds table first", severity="warning")
            return
        this = rounds[table.cursor_row]
        if not trained_adapter(this):
            self.notify(f"round {this['round']} trained no adapter", severity="warning")
            return
        self.promote(run.id, this["round"])

    @work(thread=True, exclusive=True, exit_on_error=False, group="improve", name="promoting")
    def promote(self, run_id: int, number: int) -> None:
        adapter = promote_by_hand(self.store, run_id, number)
        self.app.call_from_thread(self.promoted, adapter, number)

    def promoted(self, adapter: str, number: int) -> None:
        self.notify(f"round {number}'s adapter {adapter} promoted: the run goes on with it")
        self.post_message(UseAdapter(adapter))
        self.load()

    def action_back(self) -> None:
        self.dismiss(None)
