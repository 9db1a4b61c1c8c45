"""The main screen: the trace tree, the selected block and its candidates, the inspector,
the chat with the agent, and the status bar; the live session is driven from here.

Store reads run in thread workers; a live session's runtime runs in a thread worker and
posts its events to this screen as messages (`app.messages`), handled here one kind at a
time; the blocks that arrive together are added to the tree as one batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer, Header, Input, Tree
from textual.worker import Worker, WorkerState

from agents.events import (
    AgentMessage,
    EvaluationRecorded,
    NodeChanged,
    RuntimeEvent,
    SamplingProgress,
    SessionStarted,
    StatusChanged,
    StepWaiting,
)
from agents.safe_text import escape_controls
from app.actions import MAIN_ACTIONS, bindings, palette
from app.commands import Command, ScreenCommands
from app.job_watch import JobWatch, ending_note, status_line
from app.labelling import Given, Labeller
from app.live_control import LiveControl
from app.messages import (
    ApprovalRequested,
    LiveEvent,
)
from app.screens.asking import Asking
from app.shared import report_failure, workbench
from app.widgets.block_view import BlockView, Candidates
from app.widgets.chat import ChatInput, ChatLog
from app.widgets.inspector import Inspector
from app.widgets.status_bar import StatusBar
from app.widgets.trace_tree import (
    BlockEntry,
    Entry,
    SessionEntry,
    SessionTrace,
    TickEntry,
    TraceTree,
)
from storage import (
    EvaluationKind,
    EvaluationResult,
    Label,
    LabelValue,
    Node,
    Session,
    SessionStatus,
    with_status_reason,
)

if TYPE_CHECKING:
    from agents.memory import Hit
    from agents.runtime import Outcome
    from agents.tasks import Task
    from agents.workbench import Workbench
    from app.live import LiveSession
    from storage import TraceStore

#: How often the status bar checks whether a live agent has gone quiet (seconds).
WORKING_EVERY = 0.25
#: How often the status bar's training job is read (seconds).
JOBS_EVERY = 1.0
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
        #: the live session's approval requests: asked, set aside or waiting
        self.asking = Asking(self)
        self.inspected: tuple[int, int] | None = None
        self._working: Timer | None = None
        #: what a live session reported that the tree shows, since it was last updated
        self._arrived: list[Node] = []
        self._evaluated: list[tuple[int, int]] = []
        self._tree_update_queued = False
        #: a block is highlighted (g and b apply), and whether it has a label (L applies):
        #: the footer is refreshed when that changes
        self.block_highlighted: tuple[bool, bool] = (False, False)
        #: the training jobs seen running, to tell each one's end once
        self.job_watch = JobWatch()
        self._labeller: Labeller[None] | None = None

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

    @property
    def labeller(self) -> Labeller[None]:
        """The labels given here (`u` undoes them), once the store is open."""
        if self._labeller is None:
            self._labeller = Labeller(self.store)
        return self._labeller

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="panes"):
            yield TraceTree(id="trace-tree")
            with Vertical(id="detail"):
                with Horizontal(id="block-row"):
                    with VerticalScroll(id="block-pane"):
                        yield BlockView(
                            "Select a block in the tree to see it here.", id="block-view"
                        )
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
        self.query_one(TraceTree).loading = False
        self.load_sessions()
        self.set_interval(JOBS_EVERY, self.load_jobs)
        self.load_jobs()

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

    # -- reading the store -------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="sessions")
    def load_sessions(self) -> None:
        sessions = self.store.list_sessions(limit=1000)
        self.app.call_from_thread(self.query_one(TraceTree).show_sessions, sessions)

    @on(Tree.NodeExpanded)
    def expand_session(self, event: Tree.NodeExpanded[Entry]) -> None:
        entry = event.node.data
        tree = self.query_one(TraceTree)
        if isinstance(entry, SessionEntry) and entry.session.id not in tree.traces:
            self.load_trace(entry.session)

    @work(thread=True, exit_on_error=False, group="trace")
    def load_trace(self, session: Session) -> None:
        trace = SessionTrace.read(self.store, session)
        self.app.call_from_thread(self.query_one(TraceTree).show_trace, trace)

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
        tree = self.query_one(TraceTree)
        view, candidates = self.query_one(BlockView), self.query_one(Candidates)
        trace = tree.trace_of(entry)
        if isinstance(entry, BlockEntry) and trace is not None:
            node = trace.nodes.get(entry.node.id, entry.node)
            view.show(node, trace.labels.get(node.id))
            candidates.show(node, trace.candidates(node))
            self.inspect(trace, node.tick)
        elif isinstance(entry, TickEntry) and trace is not None:
            view.update(Text(f"tick {entry.tick}: select one of its blocks", style="dim"))
            candidates.show(None, [])
            self.inspect(trace, entry.tick)
        elif isinstance(entry, SessionEntry):
            view.show_session(entry.session)
            candidates.show(None, [])
            self.inspected = None
            self.query_one(Inspector).show_tick(None, [], [])
        else:
            view.show(None)

    def inspect(self, trace: SessionTrace, tick: int, *, force: bool = False) -> None:
        key = (trace.session.id, tick)
        if key == self.inspected and not force:
            return
        self.inspected = key
        self.load_inspector(trace.session.id, tick, trace.tick_blocks(tick))

    @work(thread=True, exclusive=True, exit_on_error=False, group="inspector")
    def load_inspector(self, session_id: int, tick: int, blocks: list[Node]) -> None:
        evaluations = self.store.evaluations_for([n.id for n in blocks])
        self.app.call_from_thread(self.show_inspector, (session_id, tick), blocks, evaluations)

    def show_inspector(
        self, key: tuple[int, int], blocks: list[Node], evaluations: list[EvaluationResult]
    ) -> None:
        if key == self.inspected:
            error = self.app.current_theme.error or "red"
            self.query_one(Inspector).show_tick(key[1], blocks, evaluations, error)

    @work(thread=True, exclusive=True, exit_on_error=False, group="jobs")
    def load_jobs(self) -> None:
        text = status_line(self.store)
        self.app.call_from_thread(setattr, self.query_one(StatusBar), "job", text)
        for job in self.job_watch.ended(self.store):
            note, severity = ending_note(job)
            self.app.call_from_thread(self.notify, note, severity=severity, markup=False)

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
            options = self.control.start(task, target=self)
        except RuntimeError as exc:
            self.notify(str(exc), severity="warning", markup=False)
            return
        live = self.control.session
        assert live is not None
        self.forget_selection()  # the last session's block is not the new one's
        status = self.query_one(StatusBar)
        status.policy = options.approval
        status.session = "starting a session…"
        status.mode = live.mode
        self.run_session(live)
        self._working = self.set_interval(WORKING_EVERY, self.show_working)
        self.refresh_bindings()

    def forget_selection(self) -> None:
        """The block view, its candidates and the inspector back to empty."""
        self.query_one(BlockView).show(None)
        self.query_one(Candidates).show(None, [])
        self.query_one(Inspector).show_tick(None, [], [])
        self.inspected = None

    @work(thread=True, exit_on_error=False, group="session")
    def run_session(self, live: LiveSession) -> Outcome | None:
        return live.run(self.bench.sessions)

    # -- what the live session reports (messages from its thread) ---------------------------

    @on(LiveEvent)
    def heard_from_agent(self, message: LiveEvent) -> None:
        """What the agent reported, shown; then the session's line in the tree (from its
        first event), and the status bar's working count starts again."""
        match event := message.event:
            case SessionStarted():
                self.query_one(ChatLog).say("console", event.text, style="dim")
            case NodeChanged():
                self._arrived.append(event.node)
                self._update_tree_later()
            case StatusChanged():
                self.session_status(event.session_id, event.status.value, event.reason)
            case AgentMessage():
                self.query_one(ChatLog).say("agent", event.text, style="green")
            case EvaluationRecorded():
                if event.kind is EvaluationKind.CALLBACK:
                    tree = self.query_one(TraceTree)
                    tree.set_evaluation(event.session_id, event.node_id, event)
                self._evaluated.append((event.session_id, event.node_id))
                self._update_tree_later()
            case StepWaiting():
                self.query_one(StatusBar).mode = f"step: next {event.upcoming} (s)"
            case SamplingProgress():
                tail = escape_controls(" ".join(event.text.split()))[-60:]
                self.query_one(StatusBar).activity = (
                    f"writing {event.block} ({event.candidates} candidates, "
                    f"{event.tokens} tokens, {event.seconds:.0f} s): {tail}"
                )
        if event.session_id and event.session_id not in self.query_one(TraceTree).traces:
            self.open_live_session(event.session_id)
        self._heard(event)

    def on_approval_requested(self, message: ApprovalRequested) -> None:
        self._heard(None)
        self.asking.arrived(message.request)

    def _heard(self, event: RuntimeEvent | None) -> None:
        """The agent reported `event` (None: it asks for approval)."""
        status = self.query_one(StatusBar)
        waiting = isinstance(event, StepWaiting)
        self.control.heard(waiting=waiting)
        if not isinstance(event, SamplingProgress):
            status.activity = ""
        if not waiting and self.live is not None:
            status.mode = self.mode_line()

    def show_working(self) -> None:
        """While the agent works on a block (the model sampling, an action running) and
        nothing has arrived for a while, the status bar counts the seconds."""
        line = self.control.working_line(self.asking.busy)
        if line is not None:
            self.query_one(StatusBar).mode = line

    def _update_tree_later(self) -> None:
        """Once the messages already queued are handled: a burst of blocks (a block's
        candidates, say) is one tree update, not one per block."""
        if not self._tree_update_queued:
            self._tree_update_queued = True
            self.call_later(self.update_tree)

    def update_tree(self) -> None:
        """The blocks and evaluation marks that arrived, into the tree; the selected
        block and the inspected tick shown again if they changed."""
        self._tree_update_queued = False
        arrived, self._arrived = self._arrived, []
        evaluated, self._evaluated = self._evaluated, []
        tree = self.query_one(TraceTree)
        nodes, touched = tree.add_arrivals(arrived, evaluated)
        if self.inspected in touched:
            session_id, tick = self.inspected
            self.inspect(tree.traces[session_id], tick, force=True)
        if nodes and tree.cursor_node is not None:
            entry = tree.cursor_node.data
            if isinstance(entry, BlockEntry) and entry.node.session_id in nodes:
                self.show_selected(entry)

    def open_live_session(self, session_id: int) -> None:
        tree = self.query_one(TraceTree)
        session = self.store.get_session(session_id)
        node = tree.add_session(session, first=True)
        tree.show_trace(SessionTrace(session))
        node.expand()
        if self.live is not None and self.live.session_id == session_id:
            tree.move_cursor(node, animate=False)  # the operator's new session, in view
        self.query_one(StatusBar).session = f"session {session_id}"

    def session_status(self, session_id: int, status: str, reason: str | None = None) -> None:
        tree = self.query_one(TraceTree)
        trace = tree.traces.get(session_id)
        if trace is not None:
            # as the store keeps it (`TraceStore.set_session_status`)
            settings = with_status_reason(trace.session.settings, reason or "")
            tree.update_session(
                dataclasses.replace(trace.session, status=SessionStatus(status), settings=settings)
            )
            cursor = tree.cursor_node
            if cursor is not None and cursor is tree.session_nodes.get(session_id):
                self.show_selected(cursor.data)  # its summary in view says the new status
        self.query_one(StatusBar).session = f"session {session_id} {status}"

    # -- approval requests (`Asking` shows them; these are what it asks of the screen) ------

    @property
    def paused(self) -> bool:
        return self.control.paused

    def decision_pending(self, note: str) -> None:
        self.control.pending_note = note
        self._show_mode()
        self.refresh_bindings()

    def decided(self, *, stop: bool) -> None:
        self.control.heard(waiting=False)  # the agent works again from now
        self._show_mode()
        if stop:
            self.action_stop()
        self.refresh_bindings()

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        # Worker.StateChanged does not bubble: the app's reporter sees only its own workers.
        report_failure(self, event)

    @on(Worker.StateChanged)
    def session_ended(self, event: Worker.StateChanged) -> None:
        if event.worker.group != "session" or not event.worker.is_finished:
            return
        self.control.ended()
        if self._working is not None:
            self._working.stop()
            self._working = None
        self.update_tree()  # the session's last messages came before this one
        self.asking.close()
        status = self.query_one(StatusBar)
        status.mode = status.activity = ""
        outcome = event.worker.result if event.state is WorkerState.SUCCESS else None
        if outcome is not None:
            status.session = f"session {outcome.session_id} {outcome.status.value}"
            self.query_one(ChatLog).say("session", outcome.message, style="dim")
            self.notify(
                f"session {outcome.session_id} {outcome.status.value}: {outcome.message}",
                severity="information" if outcome.status is SessionStatus.COMPLETED else "warning",
                markup=False,
                timeout=8,
            )
        else:
            status.session = "session failed"
        self.refresh_bindings()

    # -- actions ---------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.bench.store_ready.is_set() and action not in ("help", "chat", "tree"):
            return False  # a moment after the first frame, until the store is open
        if action in ("step", "step_tick") and self.live is None:
            return self.bench.backend is not None  # arms step mode for the next session
        if action in LIVE_ACTIONS:
            return self.live is not None
        if action in ("label_good", "label_bad"):
            return self._selected_block() is not None or None
        if action == "undo_label":
            return self.labeller.last is not None or None
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
        self._show_mode()
        self.asking.next()

    def action_run(self) -> None:
        self.control.run_freely()
        self._show_mode()
        self.asking.next()

    def action_pause(self) -> None:
        self.control.toggle_pause()
        self._show_mode()
        self.asking.next()  # resumed: a proposal the pause held is asked now

    def action_decide(self) -> None:
        if not self.asking.take_up():
            self.notify("no action waits for a decision", markup=False)

    def action_stop(self) -> None:
        if self.control.stop():
            self.notify("stopping the session…", markup=False)

    def _show_mode(self) -> None:
        self.control.heard(waiting=False)
        self.query_one(StatusBar).mode = self.mode_line()

    def mode_line(self) -> str:
        """The live session's mode, and a decision that waits off screen, if one does."""
        return self.control.mode_line(self.asking.can_take_up)

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
        self.app.push_screen(screen, self.labels_changed)

    def action_label(self) -> None:
        from app.screens.label import LabelScreen

        # Labels given there show in the tree when it closes.
        self.app.push_screen(LabelScreen(self.store), self.labels_changed)

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
        try:
            tree = self.query_one(TraceTree)
        except Exception:
            return None
        node = tree.cursor_node
        if node is not None and isinstance(node.data, BlockEntry):
            return node.data.node
        return None

    def _selected_label(self) -> Label | None:
        node = self._selected_block()
        if node is None:
            return None
        trace = self.query_one(TraceTree).traces.get(node.session_id)
        return trace.labels.get(node.id) if trace is not None else None

    def action_label_good(self) -> None:
        self._label(LabelValue.GOOD)

    def action_label_bad(self) -> None:
        self._label(LabelValue.BAD)

    def _label(self, value: LabelValue) -> None:
        node = self._selected_block()
        if node is not None:
            self.write_label(node, value)

    @work(thread=True, exit_on_error=False, group="labels")
    def write_label(self, node: Node, value: LabelValue) -> None:
        given = self.labeller.write(node.id, value, None)
        labels = self.store.session_labels(node.session_id)
        self.app.call_from_thread(self.labelled, node, labels, given)

    def labelled(
        self, node: Node, labels: dict[int, Label], given: Given[None] | None = None
    ) -> None:
        if given is not None:
            self.labeller.record(given)
        tree = self.query_one(TraceTree)
        tree.set_labels(node.session_id, labels)
        if tree.cursor_node is not None:
            self.show_selected(tree.cursor_node.data)
        self.footer_for_selection(force=True)

    def action_undo_label(self) -> None:
        given = self.labeller.last
        if given is not None:
            self.labeller.forget(given)
            self.retract(given)

    @work(thread=True, exit_on_error=False, group="labels")
    def retract(self, given: Given[None]) -> None:
        warning = self.labeller.take_back(given)
        if warning is not None:
            self.app.call_from_thread(self.notify, warning, severity="warning", markup=False)
        node = self.store.get_node(given.label.node_id)
        labels = self.store.session_labels(node.session_id)
        self.app.call_from_thread(self.labelled, node, labels)

    def labels_changed(self, _: object = None) -> None:
        """Labels were given elsewhere (the labelling screen): read back the open sessions'."""
        self.reload_labels(list(self.query_one(TraceTree).traces))

    @work(thread=True, exit_on_error=False, group="labels")
    def reload_labels(self, session_ids: list[int]) -> None:
        read = {session_id: self.store.session_labels(session_id) for session_id in session_ids}
        self.app.call_from_thread(self.show_labels, read)

    def show_labels(self, read: dict[int, dict[int, Label]]) -> None:
        tree = self.query_one(TraceTree)
        for session_id, labels in read.items():
            tree.set_labels(session_id, labels)
        if tree.cursor_node is not None:
            self.show_selected(tree.cursor_node.data)
        self.footer_for_selection()

    # -- jumping to a block ----------------------------------------------------------------

    def reveal(self, session_id: int, node_id: int) -> None:
        """Select block `node_id` in the tree (so the block view and inspector show it),
        opening its session, tick group and tick; the session is read first if needed."""
        tree = self.query_one(TraceTree)
        trace = tree.traces.get(session_id)
        # A trace read before the block was written (a batch or another console is still
        # adding to the session) is read again.
        if trace is not None and node_id in trace.nodes and session_id in tree.session_nodes:
            self.select_block(session_id, node_id)
        else:
            self.load_for_reveal(session_id, node_id, session_id not in tree.session_nodes)

    @work(thread=True, exclusive=True, exit_on_error=False, group="reveal",
          name="opening the session")  # fmt: skip
    def load_for_reveal(self, session_id: int, node_id: int, listed: bool) -> None:
        trace = SessionTrace.read(self.store, self.store.get_session(session_id))
        self.app.call_from_thread(self.show_for_reveal, trace, node_id, listed)

    def show_for_reveal(self, trace: SessionTrace, node_id: int, listed: bool) -> None:
        self.query_one(TraceTree).show_revealed(trace, node_id, listed)
        self.select_block(trace.session.id, node_id)

    def select_block(self, session_id: int, node_id: int) -> None:
        if not self.query_one(TraceTree).select_block(session_id, node_id):
            self.notify(f"block #{node_id} is not in the store", severity="warning")
