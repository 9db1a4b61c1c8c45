"""A live session: the agent's runtime in a thread, talking to the screen that runs it
through Textual messages (`app.messages`).

The runtime calls its listener and its asker from its own thread; both only post a
message to the screen, so the runtime never waits on the UI, and the screen handles the
session's events in order, on its own thread.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

from agents.approval import ApprovalRequest
from agents.backends import Backend
from agents.events import RuntimeEvent
from agents.runtime import Outcome, RunOptions, Runtime
from agents.tasks import Task
from agents.workbench import RunningSessions
from app.messages import ApprovalRequested, LiveEvent

if TYPE_CHECKING:
    from textual.message_pump import MessagePump

    from storage import TraceStore


class LiveSession:
    def __init__(
        self,
        store: TraceStore,
        backend: Backend,
        task: Task,
        options: RunOptions,
        *,
        sessions_dir: Path,
        target: MessagePump,
        resume: int | None = None,
    ) -> None:
        #: where the session's messages go (the screen that runs it)
        self.target = target
        self.task = task
        self.runtime = Runtime(
            store,
            backend,
            task,
            options,
            sessions_dir=sessions_dir,
            listener=self._report,
            asker=self._ask,
            resume=resume,
        )
        self.paused = False
        #: set once the session's end is stored (see `run`)
        self.ended = threading.Event()
        self.outcome: Outcome | None = None

    @property
    def session_id(self) -> int:
        return self.runtime.session_id

    def run(self, sessions: RunningSessions) -> Outcome | None:
        """Blocking: call from a thread worker. `ended` is set once the session's end is
        stored, however it ended; None when the console was ending and it never ran."""
        try:
            with sessions.running(self.runtime) as may_run:
                if may_run:
                    self.outcome = self.runtime.run()
        finally:
            self.ended.set()
        return self.outcome

    def _report(self, event: RuntimeEvent) -> None:
        """The runtime's listener (its thread): the event, as a message to the screen."""
        self.target.post_message(LiveEvent(self, event))

    def _ask(self, request: ApprovalRequest) -> None:
        """The runtime's asker (its thread): the screen resolves the request's Future."""
        self.target.post_message(ApprovalRequested(self, request))

    # -- control ---------------------------------------------------------------------------

    @property
    def mode(self) -> str:
        if self.paused:
            return "paused"
        stepping = self.runtime.stepping
        return f"step by {stepping}" if stepping else "run"

    def step(self, unit: str) -> bool:
        """One more block or tick. Returns False when this press only switched the agent
        into step mode (it stops at the next boundary)."""
        self.unpause()
        if self.runtime.stepping != unit:
            self.runtime.set_stepping(unit)
            return False
        self.runtime.step()
        return True

    def run_freely(self) -> None:
        self.runtime.set_stepping(None)
        self.unpause()

    def toggle_pause(self) -> None:
        if self.paused:
            self.unpause()
        else:
            self.paused = True
            self.runtime.pause()

    def unpause(self) -> None:
        self.paused = False
        self.runtime.unpause()

    def stop(self, reason: str | None = None) -> None:
        self.runtime.stop(reason)
