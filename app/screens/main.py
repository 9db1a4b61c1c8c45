"""The main screen: the trace tree, the selected block and its candidates, the inspector,
the chat with the agent, and the status bar; the operator's keys.

The screen turns keys into calls on its parts, which read the store in thread workers:
the live session is driven through `LiveControl` (`app.live_control`) and shown by
`LiveFeed`; labels go through `TreeLabels` (the shared `Labeller`); the training job is
read by `JobTicker`; the selection is shown by `DetailPanes` (all in `app.widgets`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Tree
from textual.worker import Worker

from app.actions import MAIN_ACTIONS, bindings, palette
from app.commands import Command, ScreenCommands
from app.live_control import LiveControl
from app.screens.asking import Asking
from app.shared import report_failure, workbench
from app.widgets.block_view import EMPTY, BlockView, Candidates
from app.widgets.chat import ChatInput, ChatLog
from app.widgets.detail import DetailPanes
from app.widgets.inspector import Inspector
from app.widgets.job_ticker import JobTicker
from app.widgets.live_feed import LiveFeed
from app.widgets.status_bar import StatusBar
from app.widgets.trace_tree import Entry, TraceTree
from app.widgets.tree_labels import TreeLabels
from storage import Label, LabelValue, Node

if TYPE_CHECKING:
    from agents.memory import Hit
    from agents.runtime import RunOptions
    from agents.tasks import Task
    from agents.workbench import Workbench
    from app.live import LiveSession
    from storage import TraceStore

LIVE_ACTIONS = {"step", "step_tick", "run", "pause", "stop"}


class MainCommands(ScreenCommands):
    """The main screen's verbs, and a "session: New" per shipped task."""

    ENTRIES = palette(MAIN_ACTIONS)

    def entries(self) -> Iterable[Command]:
        yield from self.ENTRIES
        from agents.tasks import startable_names

        if isinstance(self.screen, MainScreen):
            for name in startable_names():
                yield (f"session: New {name}", f"new_task('{name}')", f"Start the task {name}")


class MainScreen(Screen[None]):
    COMMANDS: ClassVar = {MainCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(MAIN_ACTIONS)

    def __init__(self) -> None:
        super().__init__()
        self._control: LiveControl | None = None
        #: the live session, shown (it runs in the feed's worker)
        self.feed = LiveFeed(self)
        #: the live session's approval requests: asked, set aside or waiting
        self.asking = Asking(self)
        #: a block is highlighted (g and b apply), and whether it has a label (L applies):
        #: the footer is refreshed when that changes
        self.block_highlighted: tuple[bool, bool] = (False, False)
        #: the status bar's training job
        self.jobs = JobTicker()
        #: the labels given here (g, b, u) and elsewhere, into the tree
        self.labels = TreeLabels(self)

    @property
    def bench(self) -> Workbench:
        return workbench(self)

    @property
    def store(self) -> TraceStore:
        return self.bench.store

    @property
    def control(self) -> LiveControl:
        """The live session, as the operator drives it."""
        if self._control is None:
            self._control = LiveControl(self.bench)
        return self._control

    @property
    def live(self) -> LiveSession | None:
        return self.control.session

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="panes"):
            yield TraceTree(id="trace-tree")
            with Vertical(id="detail"):
                with Horizontal(id="block-row"):
                    with VerticalScroll(id="block-pane"):
                        yield BlockView(EMPTY, id="block-view")
                    with VerticalScroll(id="candidates-pane"):
                        yield Candidates(id="candidates")
                with VerticalScroll(id="inspector-pane"):
                    yield Inspector(id="inspector")
        with Vertical(id="chat"):
            yield ChatLog(id="chat-log")
            yield ChatInput(
                placeholder="Message the agent (a new session when none runs) · Enter sends",
                id="chat-input",
            )
        yield StatusBar(id="status-bar")
        yield from (self.feed, self.jobs, self.labels)  # no display: they work, unseen
        yield Footer()

    def on_mount(self) -> None:
        tree = self.query_one(TraceTree)
        tree.error_colour = self.app.current_theme.error or "red"
        tree.focus()
        self.query_one(Inspector).show_tick(None, [], [])
        self.query_one(Candidates).show(None, [])
        self.show_model_state()
        if self.bench.store_ready.is_set():
            self.store_opened()
        else:
            tree.loading = True

    def store_opened(self) -> None:
        """The store is open (the console opens it after the first frame): read it."""
        self.query_one(TraceTree).load(self.store)
        self.query_one(Inspector).store = self.store
        self.jobs.start()

    def on_unmount(self) -> None:
        # Leaving the console stops the agent: its thread would otherwise wait for an
        # operator who is gone.
        if self.live is not None:
            self.live.stop()

    def show_model_state(self, loading: str | None = None) -> None:
        """The status bar's model part (`loading`: the model's loading step, while it loads)."""
        found = self.query(StatusBar)
        if found:
            found.first().show_model(self.bench, loading)

    # -- the selection ---------------------------------------------------------------------

    @on(Tree.NodeHighlighted)
    def show_entry(self, event: Tree.NodeHighlighted[Entry]) -> None:
        self.show_selected(event.node.data)
        self.footer_for_selection()

    def footer_for_selection(self, *, force: bool = False) -> None:
        now = (self._selected_block() is not None, self._selected_label() is not None)
        if force or now != self.block_highlighted:
            self.block_highlighted = now
            self.refresh_bindings()

    def show_selected(self, entry: Entry) -> None:
        DetailPanes(self).show(entry)

    # -- live sessions ---------------------------------------------------------------------

    def action_new_task(self, name: str) -> None:
        from agents.tasks import TaskError, load_task

        try:
            task = load_task(name)
        except TaskError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        self.start_session(task)

    def start_session(self, task: Task) -> None:
        try:
            options = self.control.start(task, target=self.feed)
        except RuntimeError as exc:
            self.notify(str(exc), severity="warning", markup=False)
            return
        self._run_live(options)

    def action_resume(self) -> None:
        """Go on with the stored session the cursor is in, with its own settings."""
        session = self.query_one(TraceTree).selected_session()
        if session is None:
            self.notify("select a session in the tree to resume it", severity="warning")
            return
        try:
            options, note = self.control.resume(session, target=self.feed)
        except RuntimeError as exc:
            self.notify(str(exc), severity="warning", markup=False)
            return
        if note is not None:
            self.notify(note, severity="warning", markup=False)
        self._run_live(options)

    def _run_live(self, options: RunOptions) -> None:
        live = self.control.session
        assert live is not None
        DetailPanes(self).clear()  # the last session's block is not the new one's
        status = self.query_one(StatusBar)
        status.policy = options.approval
        status.session = "starting a session…"
        status.mode = live.mode
        self.feed.run(live)
        self.refresh_bindings()

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        # Worker.StateChanged does not bubble: the app's reporter sees only its own workers.
        report_failure(self, event)

    # -- approval requests (the feed hands them over; `Asking` shows them) -----------------

    @property
    def paused(self) -> bool:
        return self.control.paused

    def decision_pending(self, note: str) -> None:
        self.control.pending_note = note
        self.feed.show_mode()
        self.refresh_bindings()

    def decided(self, *, stop: bool) -> None:
        self.control.heard(waiting=False)  # the agent works again from now
        self.feed.show_mode()
        if stop:
            self.action_stop()
        self.refresh_bindings()

    # -- actions ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.bench.store_ready.is_set() and action not in ("help", "chat", "tree"):
            return False  # a moment after the first frame, until the store is open
        if action in ("step", "step_tick") and self.live is None:
            return self.bench.backend is not None  # arms step mode for the next session
        if action in LIVE_ACTIONS:
            return self.live is not None
        if action == "resume":
            return self.bench.backend is not None and self.live is None
        if action in ("label_good", "label_bad"):
            return self._selected_block() is not None or None
        if action == "undo_label":
            return self.labels.labeller.last is not None or None
        if action == "similar":
            return self._selected_label() is not None
        if action == "decide":
            return self.asking.can_take_up
        if action == "compare":
            if self.bench.backend is None:
                return False  # no model, no comparison: off the footer
            return self.live is None or None
        return True

    def action_step(self) -> None:
        self._step("block")

    def action_step_tick(self) -> None:
        self._step("tick")

    def _step(self, unit: str) -> None:
        armed = self.live is None  # the next session starts in step mode
        note = self.control.step(unit)
        if note is not None:
            self.notify(note, markup=False)
        if armed:
            self.query_one(StatusBar).mode = f"next session steps by {unit}"
            return
        self.feed.show_mode()
        self.asking.next()

    def action_run(self) -> None:
        self.control.run_freely()
        self.feed.show_mode()
        self.asking.next()

    def action_pause(self) -> None:
        self.control.toggle_pause()
        self.feed.show_mode()
        self.asking.next()  # resumed: a proposal the pause held is asked now

    def action_decide(self) -> None:
        if not self.asking.take_up():
            self.notify("no action waits for a decision", markup=False)

    def action_stop(self) -> None:
        if self.control.stop():
            self.notify("stopping the session…", markup=False)

    def action_chat(self) -> None:
        self.query_one("#chat-input", Input).focus()

    def action_tree(self) -> None:
        self.query_one(TraceTree).focus()

    def action_help(self) -> None:
        from app.screens.help import HelpScreen

        self.app.push_screen(HelpScreen(self))

    def action_compare_held_out(self) -> None:
        from app.screens.compare import start_held_out

        start_held_out(self)

    def action_compare(self) -> None:
        from app.screens.compare import start_comparison

        start_comparison(self, self.query_one(TraceTree))

    def action_copy(self) -> None:
        block = self.query_one(TraceTree).selected_block()
        if block is None:
            self.notify("select a block in the tree to copy its text", severity="warning")
            return
        self.app.copy_to_clipboard(block.text)
        self.notify(f"copied block #{block.id} ({len(block.text):,} characters)", markup=False)

    def action_last(self) -> None:
        self.query_one(TraceTree).action_last()

    def action_search(self) -> None:
        from app.screens.search import SearchScreen

        self.app.push_screen(SearchScreen(self.store, self.bench.memory), self.jump_to_hit)

    def jump_to_hit(self, hit: Hit | None) -> None:
        if hit is not None:
            self.reveal(hit.session_id, hit.node_id)

    def action_similar(self) -> None:
        from app.screens.similar import SimilarScreen

        label = self._selected_label()
        if label is None:
            self.notify("select a labelled block first", severity="warning", markup=False)
            return
        screen = SimilarScreen(self.store, self.bench.memory, label)
        self.app.push_screen(screen, self.labels.changed_elsewhere)

    def action_label(self) -> None:
        from app.screens.label import LabelScreen

        # Labels given there show in the tree when it closes.
        self.app.push_screen(LabelScreen(self.store), self.labels.changed_elsewhere)

    @on(Input.Submitted, "#chat-input")
    def send_chat(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        event.input.value = ""
        chat = self.query_one(ChatLog)
        if self.control.chat(text):
            chat.say("you", text, style="cyan")
            return
        if self.bench.backend is None:
            self.notify(self.bench.no_model_reason(), severity="warning", markup=False)
            return
        from agents.tasks import prompt_task

        chat.say("you", text, style="cyan")
        self.start_session(prompt_task(text))

    # -- labels on the main screen ---------------------------------------------------------

    def _selected_block(self) -> Node | None:
        found = self.query(TraceTree)
        return found.first().selected_block() if found else None

    def _selected_label(self) -> Label | None:
        return self.query_one(TraceTree).selected_label()

    def action_label_good(self) -> None:
        self.labels.give(self._selected_block(), LabelValue.GOOD)

    def action_label_bad(self) -> None:
        self.labels.give(self._selected_block(), LabelValue.BAD)

    def action_undo_label(self) -> None:
        self.labels.undo()

    # -- jumping to a block ----------------------------------------------------------------

    def reveal(self, session_id: int, node_id: int) -> None:
        """Select block `node_id` in the tree (so the block view and inspector show it),
        opening its session, tick group and tick; the session is read first if needed."""
        self.query_one(TraceTree).reveal(session_id, node_id)
