"""A/B: the same task run twice, headless, once on the base model and once with an
adapter, side by side; then which side the evaluation callbacks and the logit evaluator
prefer.

Both sides share the console's one model. A backend has one active adapter, so each side
talks to it through `PinnedAdapter`, which switches the side's own adapter in for each
call under a lock the two sides share (and puts the previous one back): the two sessions
run at the same time, interleaved call by call, and every call sees its side's adapter.
The main screen starts no session of its own while a comparison runs (it would sample
with whatever adapter a side had switched in), and a comparison does not start while one
runs. Both sessions are ordinary sessions in the store, their `adapter` field set, so they
can be labelled later like any other.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, TypeVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, RichLog, Static
from textual.worker import Worker, WorkerState

from agents.backends.base import AdapterError, Backend, Candidate, Prompt
from agents.events import NodeChanged, SessionStarted, StatusChanged
from app.actions import COMPARE_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from app.messages import LiveEvent
from storage import Author, EvaluationKind, NodeStatus, SessionStatus, TraceStore
from training.rules import evaluation_passed

if TYPE_CHECKING:
    from agents.runtime import Outcome
    from agents.settings import Settings
    from agents.tasks import Task
    from app.console import ConsoleApp
    from app.live import LiveSession
    from app.screens.main import MainScreen

T = TypeVar("T")

BASE = "base"
TUNED = "adapter"
#: Blocks not on the path: they were sampled but another candidate was taken.
OFF_PATH = frozenset({NodeStatus.ALTERNATE, NodeStatus.PROPOSED})


# -- the headless part: one backend, two adapters --------------------------------------------


class PinnedAdapter(Backend):
    """`inner` with `adapter` (None: the base model) in use for every call made through
    it. The switch and the call happen under `lock`, shared by every side of a comparison,
    so sides running at once never sample with each other's adapter."""

    def __init__(self, inner: Backend, adapter: str | None, lock: threading.Lock) -> None:
        self.inner = inner
        self.adapter = adapter
        self.lock = lock
        self.name = inner.name
        self.model = inner.model
        self.features = inner.features
        self.device = inner.device
        self.parameters = inner.parameters

    def _pinned(self, call: Callable[[], T]) -> T:
        with self.lock:
            previous = self.inner.active_adapter
            if previous != self.adapter:
                self.inner.use_adapter(self.adapter)
            try:
                return call()
            finally:
                if self.inner.active_adapter != previous:
                    self.inner.use_adapter(previous)

    def generate(
        self,
        prompt: Prompt,
        *,
        n: int = 1,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        temperature: float = 1.0,
        seed: int | None = None,
        on_token: Callable[[int, str], None] | None = None,
        grammar: str | None = None,
        no_repeat: int = 0,
    ) -> list[Candidate]:
        return self._pinned(
            lambda: self.inner.generate(
                prompt,
                n=n,
                max_tokens=max_tokens,
                stop=stop,
                temperature=temperature,
                seed=seed,
                on_token=on_token,
                grammar=grammar,
                no_repeat=no_repeat,
            )
        )

    def score_yes_no(self, prompts: Sequence[str]) -> list[float]:
        return self._pinned(lambda: self.inner.score_yes_no(prompts))

    def tokenize(self, text: str) -> list[int]:
        return self.inner.tokenize(text)

    def render_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        return self.inner.render_chat(messages, add_generation_prompt=add_generation_prompt)

    @property
    def context_length(self) -> int:
        return self.inner.context_length

    def load_adapter(self, name: str, path: str) -> None:
        raise AdapterError("a comparison side's adapter is fixed for the run")

    def use_adapter(self, name: str | None) -> None:
        if name != self.adapter:
            raise AdapterError("a comparison side's adapter is fixed for the run")

    def adapters(self) -> list[str]:
        return self.inner.adapters()

    @property
    def active_adapter(self) -> str | None:
        return self.adapter

    def close(self) -> None:
        """The console's model outlives the comparison: nothing to release."""


@dataclass(frozen=True, slots=True)
class SideSummary:
    """What one side's session came to."""

    session_id: int
    adapter: str | None
    status: SessionStatus
    callbacks_passed: int
    callbacks_total: int
    #: the logit evaluator's mean log-odds over the blocks the model wrote on the path
    mean_log_odds: float | None
    blocks: int

    @property
    def pass_rate(self) -> float | None:
        return self.callbacks_passed / self.callbacks_total if self.callbacks_total else None


@dataclass(frozen=True, slots=True)
class Verdict:
    """Which side each judge prefers (BASE, TUNED, or None for no preference)."""

    callbacks: str | None
    evaluator: str | None
    overall: str | None


def summarize(store: TraceStore, session_id: int) -> SideSummary:
    """A side's evaluation-callback results and mean evaluator log-odds, from the store."""
    session = store.get_session(session_id)
    nodes = store.tree(session_id)
    results = [
        r for r in store.evaluations_for([n.id for n in nodes]) if r.kind is EvaluationKind.CALLBACK
    ]
    odds = [
        float(n.score_parts["evaluator"])
        for n in nodes
        if n.author is Author.MODEL
        and n.status not in OFF_PATH
        and isinstance(n.score_parts.get("evaluator"), int | float)
        and math.isfinite(n.score_parts["evaluator"])
    ]
    return SideSummary(
        session_id=session_id,
        adapter=session.adapter,
        status=session.status,
        callbacks_passed=sum(1 for r in results if evaluation_passed(r)),
        callbacks_total=len(results),
        mean_log_odds=sum(odds) / len(odds) if odds else None,
        blocks=len(odds),
    )


def prefer(base: float | None, tuned: float | None) -> str | None:
    if base is None or tuned is None or math.isclose(base, tuned, abs_tol=1e-9):
        return None
    return TUNED if tuned > base else BASE


def judge(base: SideSummary, tuned: SideSummary) -> Verdict:
    """The callbacks decide; where they don't (a tie, or none ran), the evaluator does."""
    callbacks = prefer(base.pass_rate, tuned.pass_rate)
    evaluator = prefer(base.mean_log_odds, tuned.mean_log_odds)
    return Verdict(callbacks, evaluator, callbacks or evaluator)


def resolve_task(settings_snapshot: dict[str, object], task_text: str) -> Task:
    """The task a stored session ran: a shipped or file task is loaded again (with its
    files); otherwise rebuilt from the snapshot, or from the session's text."""
    from agents.runtime import task_from_snapshot
    from agents.tasks import TaskError, load_task, prompt_task

    snapshot = settings_snapshot.get("task")
    if isinstance(snapshot, dict) and snapshot.get("prompt"):
        source = str(snapshot.get("source") or "")
        if source.startswith("builtin:") or source.endswith((".toml", ".py")):
            try:
                return load_task(source)
            except TaskError:
                pass
        return task_from_snapshot(snapshot)
    return prompt_task(task_text)


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
    def console(self) -> ConsoleApp:
        from app.console import ConsoleApp

        assert isinstance(self.app, ConsoleApp)
        return self.app

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
        self.console.comparison = self
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
        from app.common import session_options
        from app.live import LiveSession

        console = self.console
        backend = console.backend
        if backend is None:
            raise RuntimeError(console.no_model_reason())
        if self.adapter not in backend.adapters():
            record = self.store.get_adapter(self.adapter)
            backend.load_adapter(self.adapter, record.path)
        settings: Settings = console.settings
        options = session_options(
            settings,
            backend,
            self.agent_task,
            approval="auto",
            seed=random.randrange(1 << 30),
            memory=False,  # both sides see the same context: neither recalls the other
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
            side.outcome = side.live.run(self.console.sessions)
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
        from app.headless import Progress

        side = next((s for s in self.sides.values() if s.live is message.live), None)
        if side is None:
            return
        event = message.event
        line = Progress.describe(event)
        if line is not None:
            text = Text(line)
            if isinstance(event, NodeChanged):
                node = event.node
                if node.author is Author.MODEL and node.text.strip():
                    text.append("  " + first_line(node.text), style="dim")
            self.query_one(f"#compare-{side.key} .compare-log", RichLog).write(text)
        if isinstance(event, StatusChanged):
            side.status = event.status.value
        if isinstance(event, SessionStarted | StatusChanged):
            head = self.query_one(f"#compare-{side.key} .compare-head", Static)
            head.update(side_head(side, side.status))

    @on(Worker.StateChanged)
    def worker_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state is WorkerState.ERROR and worker.error is not None:
            self.console.report_failure(event)
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


def current_task(main: MainScreen) -> Task | None:
    """The task to compare on: the live session's, else the task of the session the tree's
    cursor is in, else the one the console was started with."""
    from app.widgets.trace_tree import SessionEntry, TraceTree

    if main.live is not None:
        return main.live.task
    tree = main.query_one(TraceTree)
    node = tree.cursor_node
    if node is not None:
        entry = node.data
        trace = tree.trace_of(entry)
        session = trace.session if trace is not None else None
        if session is None and isinstance(entry, SessionEntry):
            session = entry.session
        if session is not None and session.task.strip():
            return resolve_task(session.settings, session.task)
    return main.console.start_task


def start_held_out(main: MainScreen) -> None:
    """Pick the adapter, then run the held-out set with it and with the base."""
    from app.screens.held_out import HeldOutScreen, held_out_variants

    console = main.console
    problem = console.adapter_busy() or (
        "a session is running: stop it (x) first" if main.live is not None else None
    )
    if problem is not None:
        main.notify(problem, severity="warning", markup=False)
        return

    pick_adapter_then(
        main,
        "A/B on the held-out set: base model vs which adapter?",
        lambda adapter: HeldOutScreen(main.store, adapter, held_out_variants()),
    )


def pick_adapter_then(main: MainScreen, title: str, screen: Callable[[str], Screen[None]]) -> None:
    """The adapter picker; the adapter picked opens `screen(adapter)` if the model is free."""
    from app.screens.jobs import AdapterPicker

    console = main.console

    def picked(adapter: str | None) -> None:
        if adapter is None:
            return
        again = console.adapter_busy()
        if again is not None:
            main.notify(again, severity="warning", markup=False)
            return
        console.push_screen(screen(adapter))

    console.push_screen(AdapterPicker(main.store, title), picked)


def start_comparison(main: MainScreen) -> None:
    """Pick the adapter, then open the comparison; or say why it cannot start."""
    from agents.tasks import TaskError

    console = main.console
    problem = console.adapter_busy()
    if problem is not None:
        main.notify(problem, severity="warning", markup=False)
        return
    try:
        task = current_task(main)
    except TaskError as exc:
        main.notify(str(exc), severity="error", markup=False)
        return
    if task is None:
        main.notify(
            "select a session in the tree: its task is the one compared", severity="warning"
        )
        return

    pick_adapter_then(
        main,
        f"A/B: base model vs which adapter? · {task.title or task.name}",
        lambda adapter: CompareScreen(main.store, task, adapter),
    )


# -- rendering -------------------------------------------------------------------------------


def first_line(text: str, limit: int = 60) -> str:
    for line in text.splitlines():
        if line.strip():
            flat = line.strip()
            return flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return ""


def side_head(side: Side, status: object) -> Text:
    text = Text(side.title, style="bold")
    session_id = side.live.session_id
    if session_id:
        text.append(f"  ·  session {session_id}", style="dim")
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
