"""A/B: the same task run twice, headless, once on the base model and once with an
adapter, side by side; then which side the evaluation callbacks and the logit evaluator
prefer (`training.ab`).

Both sides share the console's one model, each through `PinnedAdapter`
(`agents.backends.pinned`): the two sessions run at the same time, interleaved call by
call, and every call sees its side's adapter. While a comparison runs it holds the model
(`Workbench.hold_model`): the main screen starts no session of its own (it would sample
with whatever adapter a side had switched in), and no other comparison starts. Both
sessions are ordinary sessions in the store, their `adapter` field set, so they can be
labelled later like any other.
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
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, RichLog, Static
from textual.worker import Worker, WorkerState

from agents.backends.pinned import PinnedAdapter
from agents.events import NodeChanged, SessionStarted, StatusChanged, progress_line
from app.actions import COMPARE_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from app.dialogs import pick_adapter_then
from app.messages import LiveEvent
from app.shared import report_failure, workbench
from app.text import first_line
from storage import Author
from training.ab import BASE, TUNED, SideSummary, Verdict, judge, resolve_task, summarize

if TYPE_CHECKING:
    from agents.runtime import Outcome
    from agents.tasks import Task
    from agents.workbench import Workbench
    from app.live import LiveSession
    from app.widgets.trace_tree import TraceTree
    from storage import TraceStore


# -- the screen -------------------------------------------------------------------------------


class CompareCommands(ScreenCommands):
    ENTRIES = palette(COMPARE_ACTIONS)


@dataclass
class Side:
    key: str
    adapter: str | None
    live: LiveSession
    outcome: Outcome | None = None
    status: str = ""
    #: the tick the side is in (the head counts them against the limit)
    tick: int = 0

    @property
    def title(self) -> str:
        return "base model" if self.adapter is None else f"adapter {self.adapter}"


class CompareScreen(Screen[None]):
    """Two columns, base and adapter, filled live; the verdict under them at the end."""

    CSS_PATH = "compare.tcss"
    COMMANDS: ClassVar = {CompareCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(COMPARE_ACTIONS)

    def __init__(self, store: TraceStore, task: Task, adapter: str) -> None:
        super().__init__()
        self.store = store
        self.agent_task = task
        self.adapter = adapter
        self.sides: dict[str, Side] = {}
        self.verdict: Verdict | None = None
        self.summaries: tuple[SideSummary, SideSummary] | None = None
        self.failed: str | None = None
        #: set while the comparison holds the model (from the start until both sides
        #: have ended): the main screen starts no session meanwhile
        self.running = threading.Event()
        self._count_lock = threading.Lock()
        self._left = 0
        self.stopping = False

    @property
    def bench(self) -> Workbench:
        return workbench(self)

    def compose(self) -> ComposeResult:
        yield Static(
            Text.assemble(("A/B  ", "bold"), self.agent_task.title or self.agent_task.name),
            id="compare-title",
        )
        with Horizontal(id="compare-columns"):
            for key, title in ((BASE, "base model"), (TUNED, f"adapter {self.adapter}")):
                with Vertical(classes="compare-side", id=f"compare-{key}"):
                    yield Static(Text(title, style="bold"), classes="compare-head")
                    yield RichLog(wrap=True, markup=False, classes="compare-log")
        yield Static("starting both sessions…", id="compare-verdict")
        yield Footer()

    def on_mount(self) -> None:
        self.running.set()
        self.bench.hold_model(self.running)
        self.prepare()

    # -- running -------------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="compare-prepare",
          name="preparing the comparison")  # fmt: skip
    def prepare(self) -> None:
        """Load the adapter into the console's model if it is not there yet, then start
        both sides with the same seed, so the adapter is the only difference."""
        try:
            sides = self.make_sides()
        except BaseException:
            self.running.clear()
            raise
        self.app.call_from_thread(self.start_sides, sides)

    def make_sides(self) -> dict[str, Side]:
        from agents.runtime import UNATTENDED, session_options
        from app.live import LiveSession

        bench = self.bench
        backend = bench.require_model()
        bench.ensure_adapter(backend, self.adapter)
        settings = bench.settings
        options = session_options(
            settings,
            backend,
            self.agent_task,
            **UNATTENDED,  # both sides see the same context: neither recalls the other
            seed=random.randrange(1 << 30),
        )
        lock = threading.Lock()
        return {
            key: Side(
                key,
                adapter,
                LiveSession(
                    self.store,
                    PinnedAdapter(backend, adapter, lock),
                    self.agent_task,
                    options,
                    sessions_dir=settings.sessions_dir(),
                    target=self,
                ),
            )
            for key, adapter in ((BASE, None), (TUNED, self.adapter))
        }

    def start_sides(self, sides: dict[str, Side]) -> None:
        self.sides = sides
        if self.stopping or not self.is_attached:
            self.running.clear()
            self.finish_all()
            return
        self._left = len(sides)
        for side in sides.values():
            self.run_side(side)
        self.query_one("#compare-verdict", Static).update(
            Text("both sessions are running (approval: auto)…", style="italic")
        )
        self.refresh_bindings()

    @work(thread=True, exit_on_error=False, group="compare-side", name="a comparison side")
    def run_side(self, side: Side) -> None:
        try:
            side.outcome = side.live.run(self.bench.sessions)
        finally:
            # Here, not in a message handler: a screen left mid-run gets no more messages,
            # and the console must not stay locked against new sessions.
            with self._count_lock:
                self._left -= 1
                if self._left == 0:
                    self.running.clear()

    @on(LiveEvent)
    def show_event(self, message: LiveEvent) -> None:
        """A side's event, as `--query` prints it, in its column."""
        side = next((s for s in self.sides.values() if s.live is message.live), None)
        if side is None:
            return
        event = message.event
        line = progress_line(event)
        if line is not None:
            text = Text(line)
            if isinstance(event, NodeChanged):
                node = event.node
                if node.author is Author.MODEL and node.text.strip():
                    text.append("  " + first_line(node.text), style="dim")
            self.query_one(f"#compare-{side.key} .compare-log", RichLog).write(text)
        if isinstance(event, StatusChanged):
            side.status = event.status.value
        moved = False
        if isinstance(event, NodeChanged) and event.node.tick > side.tick:
            side.tick, moved = event.node.tick, True
        if moved or isinstance(event, SessionStarted | StatusChanged):
            head = self.query_one(f"#compare-{side.key} .compare-head", Static)
            head.update(side_head(side, side.status))

    @on(Worker.StateChanged)
    def worker_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state is WorkerState.ERROR and worker.error is not None:
            report_failure(self, event)
            if worker.group == "compare-prepare":
                self.failed = str(worker.error)
                self.running.clear()
                self.finish_all()
                return
            if worker.group == "compare-side":
                self.failed = str(worker.error)
                self.stop_all()
        if worker.group == "compare-side" and worker.is_finished:
            running = [w for w in self.workers if w.group == "compare-side" and not w.is_finished]
            if not running:
                self.finish_all()

    def finish_all(self) -> None:
        if not self.is_attached:
            return
        self.refresh_bindings()
        ids = [side.live.session_id for side in self.sides.values()]
        if self.failed is not None or len(ids) != 2 or not all(ids):
            reason = self.failed or "stopped before both sessions started"
            self.query_one("#compare-verdict", Static).update(
                Text(f"no verdict: {reason}", style="bold red")
            )
            return
        self.query_one("#compare-verdict", Static).update(Text("judging…", style="italic"))
        self.judge_sides(ids[0], ids[1])

    @work(thread=True, exclusive=True, exit_on_error=False, group="compare-judge",
          name="judging the comparison")  # fmt: skip
    def judge_sides(self, base_id: int, tuned_id: int) -> None:
        base, tuned = summarize(self.store, base_id), summarize(self.store, tuned_id)
        self.app.call_from_thread(self.show_verdict, base, tuned)

    def show_verdict(self, base: SideSummary, tuned: SideSummary) -> None:
        self.summaries = (base, tuned)
        self.verdict = judge(base, tuned)
        if not self.is_attached:
            return
        for key, summary in ((BASE, base), (TUNED, tuned)):
            self.query_one(f"#compare-{key} .compare-head", Static).update(
                side_head(self.sides[key], summary.status.value)
            )
        self.query_one("#compare-verdict", Static).update(
            verdict_text(base, tuned, self.verdict, self.adapter)
        )

    # -- keys ------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop":
            return self.running.is_set() and not self.stopping
        return True

    def action_stop(self) -> None:
        self.stop_all()
        self.notify("stopping both sessions…", markup=False)

    def stop_all(self) -> None:
        self.stopping = True
        for side in self.sides.values():
            side.live.stop()
        self.refresh_bindings()

    def action_back(self) -> None:
        if self.running.is_set():
            self.stop_all()
        self.dismiss(None)

    def on_unmount(self) -> None:
        # Left while running: the sides stop at their next block; the console stays
        # locked against a new session until they have (`running`).
        if self.running.is_set():
            self.stop_all()


# -- starting, from the main screen ----------------------------------------------------------


def current_task(bench: Workbench, tree: TraceTree) -> Task | None:
    """The task to compare on: the live session's, else the task of the session the tree's
    cursor is in, else the one the console was started with."""
    if bench.live is not None:
        return bench.live.task
    session = tree.selected_session()
    if session is not None and session.task.strip():
        return resolve_task(session.settings, session.task)
    return bench.start_task


def start_held_out(origin: Screen[None]) -> None:
    """Pick the adapter, then run the held-out set with it and with the base."""
    from app.screens.held_out import HeldOutScreen
    from training.ab import held_out_variants

    bench = workbench(origin)
    problem = bench.adapter_busy()
    if problem is not None:
        origin.notify(problem, severity="warning", markup=False)
        return

    pick_adapter_then(
        origin,
        "A/B on the held-out set: base model vs which adapter?",
        lambda adapter: HeldOutScreen(adapter, held_out_variants()),
    )


def start_comparison(origin: Screen[None], tree: TraceTree) -> None:
    """Pick the adapter, then open the comparison on the task of the session at the tree's
    cursor; or say why it cannot start."""
    from agents.tasks import TaskError

    bench = workbench(origin)
    problem = bench.adapter_busy()
    if problem is not None:
        origin.notify(problem, severity="warning", markup=False)
        return
    try:
        task = current_task(bench, tree)
    except TaskError as exc:
        origin.notify(str(exc), severity="error", markup=False)
        return
    if task is None:
        origin.notify(
            "select a session in the tree: its task is the one compared", severity="warning"
        )
        return

    pick_adapter_then(
        origin,
        f"A/B: base model vs which adapter? · {task.title or task.name}",
        lambda adapter: CompareScreen(bench.store, task, adapter),
    )


# -- rendering -------------------------------------------------------------------------------


def side_head(side: Side, status: object) -> Text:
    text = Text(side.title, style="bold")
    session_id = side.live.session_id
    if session_id:
        text.append(f"  ·  session {session_id}", style="dim")
    if side.tick:
        text.append(f"  ·  tick {side.tick} of {side.live.runtime.options.max_ticks}")
    if status:
        text.append(f"  ·  {status}")
    return text


def verdict_text(base: SideSummary, tuned: SideSummary, verdict: Verdict, adapter: str) -> Text:
    names = {BASE: "the base model", TUNED: f"adapter {adapter}", None: "neither (a tie)"}

    def rate(summary: SideSummary) -> str:
        if not summary.callbacks_total:
            return "none ran"
        return f"{summary.callbacks_passed}/{summary.callbacks_total} passed"

    def odds(summary: SideSummary) -> str:
        if summary.mean_log_odds is None:
            return "no blocks"
        return f"{summary.mean_log_odds:+.2f} over {summary.blocks} blocks"

    text = Text()
    text.append("evaluation callbacks  ", style="bold")
    text.append(f"base {rate(base)}  ·  adapter {rate(tuned)}  →  prefer ")
    text.append(names[verdict.callbacks], style="bold")
    text.append("\nlogit evaluator       ", style="bold")
    text.append(f"base {odds(base)}  ·  adapter {odds(tuned)}  →  prefers ")
    text.append(names[verdict.evaluator], style="bold")
    text.append("\npreferred: ", style="bold")
    text.append(names[verdict.overall], style="bold green" if verdict.overall else "bold")
    text.append(
        f"  (sessions {base.session_id} and {tuned.session_id} are in the store to label)",
        style="dim",
    )
    return text
