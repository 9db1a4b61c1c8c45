"""A live session: the agent's runtime in a thread, talking to the console through one
queue that the screen drains on a timer.

The runtime calls its listener and its asker from its own thread; both only put onto the
queue, so the runtime never waits on the UI and the UI reads a burst of blocks as one
batch (one tree update per batch, not per block).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from pathlib import Path

from agents.approval import ApprovalRequest
from agents.backends import Backend
from agents.runtime import Event, Outcome, RunOptions, Runtime
from agents.tasks import Task
from app.signals import RunningSessions
from storage import TraceStore

Item = Event | ApprovalRequest


@dataclass
class Drained:
    events: list[Event]
    requests: list[ApprovalRequest]


class LiveSession:
    def __init__(
        self,
        store: TraceStore,
        backend: Backend,
        task: Task,
        options: RunOptions,
        *,
        sessions_dir: Path,
        resume: int | None = None,
    ) -> None:
        self.inbox: queue.SimpleQueue[Item] = queue.SimpleQueue()
        self.task = task
        self.runtime = Runtime(
            store,
            backend,
            task,
            options,
            sessions_dir=sessions_dir,
            listener=self.inbox.put,
            asker=self.inbox.put,
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

    def drain(self, limit: int = 5000) -> Drained:
        """What the runtime said since the last drain (at most `limit` items, so a
        flood cannot stall one frame; the rest waits for the next drain)."""
        drained = Drained([], [])
        for _ in range(limit):
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, ApprovalRequest):
                drained.requests.append(item)
            else:
                drained.events.append(item)
        return drained

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
