"""The batches screen: every batch run (`agent-console batch`), newest first, with its
progress and results, and the highlighted batch's tasks; enter opens a task's session in
the main screen.

A batch usually runs in another process (the CLI, or Ray workers): the store is all the
two share, so this screen polls it in a thread worker, once a second. A finished batch's
summary does not change until it is resumed (which sets it running again and touches
`updated_at`), so only running batches, and the highlighted one's tasks, are read again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.worker import Worker

from agents.batch import Summary, by_adapter, describe_counts, spec_name, summarize
from agents.safe_text import escape_controls
from app.actions import BATCHES_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from app.shared import report_failure
from storage import Batch, BatchStatus, BatchTask, BatchTaskStatus, NodeStatus

if TYPE_CHECKING:
    from storage.views import Batches, Trees

    class BatchesAndTrees(Batches, Trees, Protocol):
        """The batches, and the trees of their sessions."""


#: How often the batches and the highlighted batch's tasks are read (seconds).
POLL_EVERY = 1.0
#: The most batches the list shows (newest first).
BATCH_LIMIT = 200
#: Cells of the progress bar.
BAR_WIDTH = 10
BATCH_COLUMNS = (
    ("id", "id"),
    ("name", "name"),
    ("status", "status"),
    ("progress", "bar"),
    ("done", "done"),
    ("ok", "completed"),
    ("failed", "failed"),
    ("trunc", "truncated"),
    ("run", "running"),
    ("left", "left"),
    ("pass", "pass"),
    ("reward", "reward"),
    ("tokens", "tokens"),
    ("adapter", "adapter"),
)
TASK_COLUMNS = (
    ("line", "line"),
    ("task", "task"),
    ("status", "status"),
    ("session", "session"),
    ("checks", "checks"),
    ("reward", "reward"),
    ("tokens", "tokens"),
    ("error", "error"),
)

BATCH_STYLES = {
    BatchStatus.RUNNING: "bold cyan",
    BatchStatus.COMPLETED: "green",
    BatchStatus.ABORTED: "yellow",
}
TASK_STYLES = {
    BatchTaskStatus.PENDING: "dim",
    BatchTaskStatus.RUNNING: "bold cyan",
    BatchTaskStatus.COMPLETED: "green",
    BatchTaskStatus.FAILED: "bold red",
    BatchTaskStatus.TRUNCATED: "yellow",
    BatchTaskStatus.ABORTED: "yellow",
}
EMPTY = "no batches yet: `agent-console batch TASKS.jsonl` runs one (its progress shows here)"


def finished_count(counts: Mapping[BatchTaskStatus, int]) -> int:
    return sum(
        counts[s]
        for s in (BatchTaskStatus.COMPLETED, BatchTaskStatus.FAILED, BatchTaskStatus.TRUNCATED)
    )


def left_count(counts: Mapping[BatchTaskStatus, int]) -> int:
    return counts[BatchTaskStatus.PENDING] + counts[BatchTaskStatus.ABORTED]


def progress_bar(done: int, total: int, width: int = BAR_WIDTH) -> Text:
    filled = round(width * done / total) if total else 0
    return Text.assemble(("█" * filled, "green"), ("░" * (width - filled), "dim"))


def compact(number: int) -> str:
    """Tokens as `950`, `12.3k`, `4.5M`."""
    if number >= 1_000_000:
        return f"{number / 1_000_000:.1f}M"
    if number >= 1000:
        return f"{number / 1000:.1f}k"
    return str(number)


def percent(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "-"


def reward(value: float | None) -> str:
    return f"{value:.3f}" if value is not None else "-"


def batch_cells(summary: Summary) -> dict[str, Text | str]:
    batch, counts = summary.batch, summary.counts
    total, done = sum(counts.values()), finished_count(counts)
    return {
        "id": str(batch.id),
        "name": batch.name,
        "status": Text(batch.status.value, style=BATCH_STYLES.get(batch.status, "")),
        "bar": progress_bar(done, total),
        "done": f"{done}/{total}",
        "completed": str(counts[BatchTaskStatus.COMPLETED]),
        "failed": str(counts[BatchTaskStatus.FAILED]),
        "truncated": str(counts[BatchTaskStatus.TRUNCATED]),
        "running": str(counts[BatchTaskStatus.RUNNING]),
        "left": str(left_count(counts)),
        "pass": percent(summary.pass_rate),
        "reward": reward(summary.mean_reward),
        "tokens": compact(summary.tokens),
        "adapter": summary.adapter or "base",
    }


def task_cells(task: BatchTask) -> dict[str, Text | str]:
    result = task.result
    total = result.get("checks_total")
    value = result.get("reward")
    error = escape_controls(" ".join((task.error or "").split()))
    return {
        "line": str(task.line),
        "task": spec_name(task.spec),
        "status": Text(task.status.value, style=TASK_STYLES.get(task.status, "")),
        "session": f"#{task.session_id}" if task.session_id is not None else "-",
        "checks": f"{result.get('checks_passed', 0)}/{total}" if total else "-",
        "reward": reward(float(value)) if isinstance(value, int | float) else "-",
        "tokens": compact(int(result.get("tokens", 0))) if result else "-",
        "error": Text(error[:200], style="red") if error else "",
    }


def batch_summary(summary: Summary, versus: list[Summary]) -> Text:
    batch = summary.batch
    text = Text.assemble(
        (f"batch {batch.id}", "bold"),
        ("  ·  ", "dim"),
        (batch.name, "bold"),
        ("  ·  ", "dim"),
        (batch.status.value, BATCH_STYLES.get(batch.status, "")),
        ("  ·  ", "dim"),
        summary.adapter or "base model",
    )
    config = batch.config
    options = [
        f"{key} {config[key]}"
        for key in ("workers", "approval", "backend", "model")
        if config.get(key) is not None
    ]
    if options:
        text.append("\n" + ", ".join(options), style="dim")
    text.append("\n" + describe_counts(summary.counts))
    if summary.with_checks:
        text.append(f"; {percent(summary.pass_rate)} of checks passed, {summary.solved_text()}")
    text.append(f"; mean reward {reward(summary.mean_reward)}; {summary.tokens} tokens")
    others = [s for s in versus if s.batch.id != batch.id]
    for other in others:
        text.append(
            f"\n{other.adapter or 'base'} (batch {other.batch.id}): "
            f"{percent(other.pass_rate)} of checks passed, "
            f"{other.solved_text()}, "
            f"mean reward {reward(other.mean_reward)}",
            style="dim",
        )
    if batch.status is BatchStatus.ABORTED:
        text.append(
            f"\nstopped: `agent-console batch --resume {batch.id}` runs what is left", style="dim"
        )
    return text


@dataclass(frozen=True, slots=True)
class BatchesRead:
    """One poll's reading: every listed batch's summary, and one batch's tasks."""

    summaries: list[Summary]
    #: the batch whose tasks were read (the highlighted one), or None
    batch_id: int | None
    tasks: list[BatchTask]
    #: the batch's results beside the latest batch of the same file for each adapter
    versus: list[Summary]


class BatchesCommands(ScreenCommands):
    ENTRIES = palette(BATCHES_ACTIONS)


class BatchesScreen(Screen[tuple[int, int] | None]):
    """Every batch, newest first, and the highlighted one's tasks. Dismissed with
    (session id, block id) to reveal in the tree, or None."""

    CSS_PATH = "batches.tcss"
    COMMANDS: ClassVar = {BatchesCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(BATCHES_ACTIONS)

    def __init__(self, store: BatchesAndTrees) -> None:
        super().__init__()
        self.store = store
        #: the highlighted batch's id (None while the list is empty)
        self.selected: int | None = None
        self.summaries: dict[int, Summary] = {}
        self.order: list[int] = []
        self.tasks: list[BatchTask] = []
        #: whose tasks the task table shows
        self.tasks_of: int | None = None
        self.versus: list[Summary] = []
        self.polling = False
        self.loaded = False

    def compose(self) -> ComposeResult:
        batches: DataTable[Text | str] = DataTable(
            id="batches-table", cursor_type="row", zebra_stripes=True
        )
        for label, key in BATCH_COLUMNS:
            batches.add_column(label, key=key)
        yield batches
        yield Static("reading the batches…", id="batches-summary")
        tasks: DataTable[Text | str] = DataTable(
            id="batch-tasks", cursor_type="row", zebra_stripes=True
        )
        for label, key in TASK_COLUMNS:
            tasks.add_column(label, key=key)
        yield tasks
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#batches-table", DataTable).border_title = "batches"
        self.query_one("#batch-tasks", DataTable).border_title = "tasks"
        self.query_one("#batches-table", DataTable).focus()
        self.poll()
        self.set_interval(POLL_EVERY, self.poll)

    # -- reading (thread worker) ------------------------------------------------------------

    def poll(self) -> None:
        if self.polling:
            return  # the last read is still going: don't pile up (see apply_read)
        self.polling = True
        # A finished batch's summary stands until the batch runs again.
        known = {
            batch_id: summary
            for batch_id, summary in self.summaries.items()
            if summary.batch.status is not BatchStatus.RUNNING
        }
        self.read_batches(known, self.selected)

    @work(thread=True, exclusive=True, exit_on_error=False, group="batches-poll",
          name="reading the batches")  # fmt: skip
    def read_batches(self, known: dict[int, Summary], selected: int | None) -> None:
        batches = self.store.list_batches(limit=BATCH_LIMIT)
        summaries = [self._summary(batch, known.get(batch.id)) for batch in batches]
        ids = [batch.id for batch in batches]
        chosen = selected if selected in ids else (ids[0] if ids else None)
        tasks: list[BatchTask] = []
        versus: list[Summary] = []
        if chosen is not None:
            tasks = self.store.batch_tasks(chosen)
            batch = batches[ids.index(chosen)]
            versus = by_adapter(self.store, batch) if batch.source_hash else []
        self.app.call_from_thread(self.apply_read, BatchesRead(summaries, chosen, tasks, versus))

    def _summary(self, batch: Batch, known: Summary | None) -> Summary:
        if known is not None and known.batch == batch:
            return known
        return summarize(self.store, batch)

    @on(Worker.StateChanged)
    def worker_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "batches-poll" and event.worker.is_finished:
            self.polling = False
        report_failure(self, event)

    # -- showing (UI thread) ----------------------------------------------------------------

    def apply_read(self, read: BatchesRead) -> None:
        self.polling = False
        if not self.is_attached:
            return
        self.loaded = True
        self.summaries = {s.batch.id: s for s in read.summaries}
        self.show_batches(read.summaries)
        if read.batch_id == self.selected:
            self.tasks, self.versus = read.tasks, read.versus
            self.show_tasks(read.batch_id)
        self.show_detail()
        if self.selected is not None and read.batch_id != self.selected:
            self.poll()  # the highlight moved while reading: its tasks now

    def show_batches(self, summaries: list[Summary]) -> None:
        table: DataTable[Text | str] = self.query_one("#batches-table", DataTable)
        order = [s.batch.id for s in summaries]
        if order != self.order:
            keep = self.selected
            table.clear()
            for summary in summaries:
                cells = batch_cells(summary)
                table.add_row(*(cells[key] for _, key in BATCH_COLUMNS), key=str(summary.batch.id))
            self.order = order
            if keep in order:
                table.move_cursor(row=order.index(keep), animate=False)
            self.selected = order[table.cursor_row] if order else None
            return
        for summary in summaries:
            for key, value in batch_cells(summary).items():
                table.update_cell(str(summary.batch.id), key, value)

    def show_tasks(self, batch_id: int | None) -> None:
        table: DataTable[Text | str] = self.query_one("#batch-tasks", DataTable)
        rows = [str(task.id) for task in self.tasks]
        if batch_id != self.tasks_of or rows != [str(k.value) for k in table.rows]:
            keep = table.cursor_row if batch_id == self.tasks_of else 0
            table.clear()
            for task in self.tasks:
                cells = task_cells(task)
                table.add_row(*(cells[key] for _, key in TASK_COLUMNS), key=str(task.id))
            self.tasks_of = batch_id
            if rows:
                table.move_cursor(row=min(keep, len(rows) - 1), animate=False)
            return
        for task in self.tasks:
            for key, value in task_cells(task).items():
                table.update_cell(str(task.id), key, value)

    def show_detail(self) -> None:
        summary_view = self.query_one("#batches-summary", Static)
        summary = self.summaries.get(self.selected) if self.selected is not None else None
        if summary is None:
            summary_view.update(
                Text(EMPTY if self.loaded else "reading the batches…", style="dim italic")
            )
            return
        summary_view.update(batch_summary(summary, self.versus))

    @on(DataTable.RowHighlighted, "#batches-table")
    def row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value
        batch_id = int(key) if key is not None else None
        if batch_id == self.selected:
            return
        self.selected = batch_id
        self.versus = []
        self.show_detail()
        self.poll()

    # -- keys -------------------------------------------------------------------------------

    @property
    def highlighted_task(self) -> BatchTask | None:
        table: DataTable[Text | str] = self.query_one("#batch-tasks", DataTable)
        if self.tasks_of != self.selected or not self.tasks:
            return None
        row = table.cursor_row
        return self.tasks[row] if 0 <= row < len(self.tasks) else None

    def action_open(self) -> None:
        tasks = self.query_one("#batch-tasks", DataTable)
        if self.focused is not tasks:
            if self.selected is not None:
                tasks.focus()
            return
        task = self.highlighted_task
        if task is None:
            return
        if task.session_id is None:
            self.notify(
                f"task {task.line} ({spec_name(task.spec)}) has not started: no session yet",
                severity="warning",
                markup=False,
            )
            return
        self.find_block(task.session_id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="batches-open",
          name="opening the session")  # fmt: skip
    def find_block(self, session_id: int) -> None:
        """The block to reveal: the session's last one on its path (where it ended)."""
        nodes = [n for n in self.store.tree(session_id) if n.status is not NodeStatus.ALTERNATE]
        node_id = nodes[-1].id if nodes else None
        self.app.call_from_thread(self.open_block, session_id, node_id)

    def open_block(self, session_id: int, node_id: int | None) -> None:
        if not self.is_current:
            return
        if node_id is None:
            self.notify(f"session #{session_id} has no blocks yet", markup=False)
            return
        self.dismiss((session_id, node_id))

    def action_back(self) -> None:
        self.dismiss(None)
