"""A session's state, which every part of the runtime reads and writes, and its control
from any thread: stop, pause, step mode and the operator's chat, with the waits at block
boundaries that honour them."""

from __future__ import annotations

import queue
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from agents import prompting
from agents.approval import Aborted
from agents.events import Listener, RuntimeEvent, StepWaiting
from agents.prompting import Prompter
from agents.runtime.context import ContextWindow
from agents.runtime.options import RunOptions
from agents.tasks import Task
from storage import Node, TraceStore

if TYPE_CHECKING:
    from agents.backends import Backend


@dataclass
class SessionState:
    """What one session's runtime holds: its store, model, task and options, the path it
    has written so far and its counts; events go to `listener`."""

    store: TraceStore
    backend: Backend
    task: Task
    #: replaced, not changed, when the memory turns itself off
    options: RunOptions
    sessions_dir: Path
    #: the headers' timestamps (tests pin it: a header's digits are tokens the model reads)
    clock: Callable[[], float]
    listener: Listener | None = None
    session_id: int = 0
    path: list[Node] = field(default_factory=list)
    tokens: int = 0
    ticks_run: int = 0
    last_message: str | None = None
    finish_message: str | None = None
    task_passed: tuple[int, int] = (0, 0)
    #: the next tick to run (set when the session opens)
    next_tick: int = 0
    rng: random.Random = field(init=False)
    window: ContextWindow = field(init=False)
    #: how blocks and questions are put to the model (`agents.prompting`)
    prompter: Prompter = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.options.seed)
        self.window = ContextWindow(self.backend, self.options.context_tokens)
        self.prompter = Prompter(
            self.options.prompt,
            self.options.form,
            self.backend.render_chat if self.options.prompt == prompting.CHAT else None,
        )

    @property
    def workdir(self) -> Path:
        return self.sessions_dir / str(self.session_id) / "work"

    def emit(self, event: RuntimeEvent) -> None:
        if self.listener is not None:
            self.listener(event)


class Control:
    """The calls the console makes from the UI thread while the session runs in a worker
    thread, and the waits at the runtime's block boundaries that honour them."""

    def __init__(self, state: SessionState) -> None:
        self.state = state
        self.stopped = threading.Event()
        #: why the session was stopped, when a caller said
        self.stop_why: str | None = None
        self._running = threading.Event()
        self._running.set()
        self.chat: queue.SimpleQueue[str] = queue.SimpleQueue()
        # Step mode: None runs freely; "block" or "tick" waits for a permit from `step()`.
        self._stepping: str | None = None
        self._permits = 0
        self._step_lock = threading.Condition()

    # -- any thread -----------------------------------------------------------------------

    def stop(self, reason: str | None = None) -> None:
        if reason is not None and self.stop_why is None:
            self.stop_why = reason
        self.stopped.set()
        self._running.set()

    def pause(self) -> None:
        self._running.clear()

    def unpause(self) -> None:
        self._running.set()

    def set_stepping(self, unit: str | None) -> None:
        if unit not in (None, "block", "tick"):
            raise ValueError(f"step unit must be block, tick or None, not {unit!r}")
        with self._step_lock:
            self._stepping = unit
            self._permits = 0
            self._step_lock.notify_all()

    def step(self) -> None:
        with self._step_lock:
            self._permits += 1
            self._step_lock.notify_all()

    @property
    def stepping(self) -> str | None:
        return self._stepping

    def post_message(self, text: str) -> None:
        if text.strip():
            self.chat.put(text)

    # -- the waits (the runtime's thread) ---------------------------------------------------

    def checkpoint(self) -> None:
        """Between blocks: honour stop and pause."""
        while not self._running.wait(0.1):
            if self.stopped.is_set():
                break
        if self.stopped.is_set():
            raise Aborted("stopped")

    def await_step(self, unit: str, upcoming: str) -> None:
        """In step mode, wait at this boundary until the operator lets the agent on."""
        with self._step_lock:
            if self._stepping != unit:
                return
            if self._permits == 0:
                self.state.emit(
                    StepWaiting(session_id=self.state.session_id, unit=unit, upcoming=upcoming)
                )
            while self._stepping == unit and self._permits == 0:
                if self.stopped.is_set():
                    raise Aborted("stopped")
                self._step_lock.wait(0.1)
            if self._stepping == unit:
                self._permits -= 1
