"""The operator's live session, shown on the main screen: an invisible widget that runs
the session in its thread worker and takes its messages (`app.messages`).

Each runtime event updates what shows it: the session's line and blocks in the tree (a
burst of blocks as one update), its status on its line and in the status bar, the agent's
words and the session's first line in the chat, step mode and sampling progress in the
status bar, and the count of seconds while the agent works with nothing to show. Its
approval requests go to the screen, whose `Asking` shows them one at a time. The screen
keeps the keys, the selection and the requests (`FeedOwner`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Protocol

from textual import on, work
from textual.widget import Widget
from textual.worker import Worker, WorkerState

from agents.events import (
    AgentMessage,
    BlockSampled,
    EvaluationRecorded,
    NodeChanged,
    RuntimeEvent,
    SamplingProgress,
    SessionStarted,
    StatusChanged,
    StepWaiting,
    candidates,
)
from agents.safe_text import escape_controls
from app.messages import ApprovalRequested, LiveEvent
from app.shared import report_failure
from app.widgets.chat import ChatLog
from app.widgets.inspector import Inspector
from app.widgets.status_bar import StatusBar
from app.widgets.trace_tree import BlockEntry, Entry, SessionTrace, TraceTree
from storage import EvaluationKind, Node, SessionStatus, with_status_reason

if TYPE_CHECKING:
    from textual.timer import Timer

    from agents.approval import ApprovalRequest
    from agents.runtime import Outcome
    from app.live import LiveSession
    from app.live_control import LiveControl
    from storage.views import Sessions

#: How often the status bar checks whether a live agent has gone quiet (seconds).
WORKING_EVERY = 0.25


class FeedOwner(Protocol):
    """What the feed needs of the screen it shows the session on."""

    asking: Requests

    @property
    def control(self) -> LiveControl: ...

    @property
    def store(self) -> Sessions: ...

    def show_selected(self, entry: Entry) -> None: ...

    def refresh_bindings(self) -> None: ...


class Requests(Protocol):
    """The screen's approval requests (`app.screens.asking.Asking`), as the feed uses them."""

    @property
    def busy(self) -> bool: ...

    @property
    def can_take_up(self) -> bool: ...

    def arrived(self, request: ApprovalRequest) -> None: ...

    def close(self) -> None: ...


class LiveFeed(Widget):
    DEFAULT_CSS = "LiveFeed { display: none; }"

    def __init__(self, owner: FeedOwner) -> None:
        super().__init__(id="live-feed")
        self.owner = owner
        self._working: Timer | None = None
        #: what a live session reported that the tree shows, since it was last updated
        self._arrived: list[Node] = []
        self._evaluated: list[tuple[int, int]] = []
        self._tree_update_queued = False

    @property
    def control(self) -> LiveControl:
        return self.owner.control

    def run(self, live: LiveSession) -> None:
        """Run `live` (its messages come here) and count the seconds it works."""
        self.run_session(live)
        self._working = self.set_interval(WORKING_EVERY, self.show_working)

    @work(thread=True, exit_on_error=False, group="session")
    def run_session(self, live: LiveSession) -> Outcome | None:
        from app.shared import workbench

        return live.run(workbench(self).sessions)

    # -- what the live session reports (messages from its thread) ---------------------------

    @on(LiveEvent)
    def heard_from_agent(self, message: LiveEvent) -> None:
        """What the agent reported, shown; then the session's line in the tree (from its
        first event), and the status bar's working count starts again."""
        screen = self.screen
        match event := message.event:
            case SessionStarted():
                line = self.control.started(event)
                screen.query_one(ChatLog).say("console", line, style="dim")
            case NodeChanged():
                self._arrived.append(event.node)
                self._update_tree_later()
            case StatusChanged():
                self.session_status(event.session_id, event.status.value, event.reason)
            case AgentMessage():
                screen.query_one(ChatLog).say("agent", event.text, style="green")
            case EvaluationRecorded():
                if event.kind is EvaluationKind.CALLBACK:
                    tree = screen.query_one(TraceTree)
                    tree.set_evaluation(event.session_id, event.node_id, event)
                self._evaluated.append((event.session_id, event.node_id))
                self._update_tree_later()
            case StepWaiting():
                screen.query_one(StatusBar).mode = f"step: next {event.upcoming} (s)"
            case BlockSampled():
                told = self.control.sampled(event)
                if told is not None:
                    self.notify(told, timeout=30, markup=False)
            case SamplingProgress():
                tail = escape_controls(" ".join(event.text.split()))[-60:]
                screen.query_one(StatusBar).activity = (
                    f"writing {event.block} ({candidates(event.candidates)}, "
                    f"{event.tokens} tokens, {event.seconds:.0f} s): {tail}"
                )
        if event.session_id and event.session_id not in screen.query_one(TraceTree).traces:
            self.open_live_session(event.session_id)
        self._heard(event)

    def on_approval_requested(self, message: ApprovalRequested) -> None:
        self._heard(None)
        self.owner.asking.arrived(message.request)

    def _heard(self, event: RuntimeEvent | None) -> None:
        """The agent reported `event` (None: it asks for approval)."""
        status = self.screen.query_one(StatusBar)
        waiting = isinstance(event, StepWaiting)
        self.control.heard(waiting=waiting)
        if not isinstance(event, SamplingProgress):
            status.activity = ""
        if not waiting and self.control.session is not None:
            status.mode = self.mode_line()

    def show_working(self) -> None:
        """While the agent works on a block (the model sampling, an action running) and
        nothing has arrived for a while, the status bar counts the seconds."""
        line = self.control.working_line(self.owner.asking.busy)
        if line is not None:
            self.screen.query_one(StatusBar).mode = line

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
        tree = self.screen.query_one(TraceTree)
        nodes, touched = tree.add_arrivals(arrived, evaluated)
        inspector = self.screen.query_one(Inspector)
        if inspector.showing is not None and inspector.showing in touched:
            session_id, tick = inspector.showing
            inspector.inspect(tree.traces[session_id], tick, force=True)
        if nodes and tree.cursor_node is not None:
            entry = tree.cursor_node.data
            if isinstance(entry, BlockEntry) and entry.node.session_id in nodes:
                self.owner.show_selected(entry)

    def open_live_session(self, session_id: int) -> None:
        tree = self.screen.query_one(TraceTree)
        session = self.owner.store.get_session(session_id)
        node = tree.add_session(session, first=True)
        tree.show_trace(SessionTrace(session))
        node.expand()
        live = self.control.session
        if live is not None and live.session_id == session_id:
            tree.move_cursor(node, animate=False)  # the operator's new session, in view
        self.screen.query_one(StatusBar).session = f"session {session_id}"

    def session_status(self, session_id: int, status: str, reason: str | None = None) -> None:
        tree = self.screen.query_one(TraceTree)
        trace = tree.traces.get(session_id)
        if trace is not None:
            # as the store keeps it (`TraceStore.set_session_status`)
            settings = with_status_reason(trace.session.settings, reason or "")
            tree.update_session(
                dataclasses.replace(trace.session, status=SessionStatus(status), settings=settings)
            )
            cursor = tree.cursor_node
            if cursor is not None and cursor is tree.session_nodes.get(session_id):
                self.owner.show_selected(cursor.data)  # its summary says the new status
        self.screen.query_one(StatusBar).session = f"session {session_id} {status}"

    # -- the status bar's mode ------------------------------------------------------------

    def show_mode(self) -> None:
        self.control.heard(waiting=False)
        self.screen.query_one(StatusBar).mode = self.mode_line()

    def mode_line(self) -> str:
        """The live session's mode, and a decision that waits off screen, if one does."""
        return self.control.mode_line(self.owner.asking.can_take_up)

    # -- the session's worker -------------------------------------------------------------

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
        self.owner.asking.close()
        self.owner.refresh_bindings()
        status = self.screen.query_one(StatusBar)
        status.mode = status.activity = ""
        outcome = event.worker.result if event.state is WorkerState.SUCCESS else None
        if outcome is not None:
            status.session = f"session {outcome.session_id} {outcome.status.value}"
            self.screen.query_one(ChatLog).say("session", outcome.message, style="dim")
            self.notify(
                f"session {outcome.session_id} {outcome.status.value}: {outcome.message}",
                severity="information" if outcome.status is SessionStatus.COMPLETED else "warning",
                markup=False,
                timeout=8,
            )
        else:
            status.session = "session failed"
