"""A session's state, and its control from any thread: stop, pause, step mode and the
operator's chat, with the waits at block boundaries that honour them."""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agents import prompting
from agents.approval import Aborted, Asker, Gate
from agents.events import Listener, RuntimeEvent, StepWaiting
from agents.memory import Memory
from agents.prompting import Prompter
from agents.runtime.context import ContextWindow
from agents.runtime.options import RunOptions
from agents.sandbox import Kernel
from agents.tasks import Task
from storage import Node, TraceStore

if TYPE_CHECKING:
    from agents.backends import Backend


class RuntimeControl:
    """What one session's runtime holds, and the calls the console makes from the UI
    thread while the session runs in a worker thread."""

    def __init__(
        self,
        store: TraceStore,
        backend: Backend,
        task: Task,
        options: RunOptions,
        *,
        sessions_dir: Path,
        listener: Listener | None = None,
        asker: Asker | None = None,
        resume: int | None = None,
        memory: Memory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        #: the headers' timestamps (tests pin it: a header's digits are tokens the model reads)
        self.clock = clock
        #: the retrieval memory (None: off, or it could not load); see `_recall`
        self.memory = memory
        self.backend = backend
        self.task = task
        self.options = options
        self.sessions_dir = sessions_dir
        self.listener = listener
        self.gate = Gate(options.approval, options.approval_threshold, asker)
        self.resume_id = resume
        self.session_id = 0
        self.path: list[Node] = []
        self.tokens = 0
        self.ticks_run = 0
        self.last_message: str | None = None
        self.finish_message: str | None = None
        self.task_passed: tuple[int, int] = (0, 0)
        #: the next tick to run (set when the session opens)
        self._tick = 0
        self._stop = threading.Event()
        self._stop_why: str | None = None
        self._running = threading.Event()
        self._running.set()
        self._chat: queue.SimpleQueue[str] = queue.SimpleQueue()
        # Step mode: None runs freely; "block" or "tick" waits for a permit from `step()`.
        self._stepping: str | None = None
        self._permits = 0
        self._step_lock = threading.Condition()
        self._rng = random.Random(options.seed)
        self._kernel: Kernel | None = None
        #: the task's checks' own kernel, while they run
        self._checker: Kernel | None = None
        self._window = ContextWindow(backend, options.context_tokens)
        #: how blocks and questions are put to the model (`agents.prompting`)
        self.prompter = Prompter(
            options.prompt,
            options.form,
            backend.render_chat if options.prompt == prompting.CHAT else None,
        )

    # -- control (any thread) ------------------------------------------------------------

    def stop(self, reason: str | None = None) -> None:
        """Abort the session: at the next block boundary, or at once while it waits for
        the operator or runs code in the sandbox. `reason` is stored as the session's
        (default: "stopped by the operator")."""
        if reason is not None and self._stop_why is None:
            self._stop_why = reason
        self._stop.set()
        self._running.set()
        for kernel in (self._kernel, self._checker):
            if kernel is not None:
                kernel.close()

    def pause(self) -> None:
        self._running.clear()

    def unpause(self) -> None:
        self._running.set()

    def set_stepping(self, unit: str | None) -> None:
        """Step mode: with `"block"` the agent waits for `step()` before each block, with
        `"tick"` before each tick; `None` lets it run until it needs the operator."""
        if unit not in (None, "block", "tick"):
            raise ValueError(f"step unit must be block, tick or None, not {unit!r}")
        with self._step_lock:
            self._stepping = unit
            self._permits = 0
            self._step_lock.notify_all()

    def step(self) -> None:
        """Let a stepping agent make one more block (or tick)."""
        with self._step_lock:
            self._permits += 1
            self._step_lock.notify_all()

    @property
    def stepping(self) -> str | None:
        return self._stepping

    def post_message(self, text: str) -> None:
        """An operator chat message: it enters the context as an observation block at the
        next tick boundary."""
        if text.strip():
            self._chat.put(text)

    @property
    def workdir(self) -> Path:
        return self.sessions_dir / str(self.session_id) / "work"

    # -- the waits (the runtime's thread) ---------------------------------------------------

    def _checkpoint(self) -> None:
        """Between blocks: honour stop and pause."""
        while not self._running.wait(0.1):
            if self._stop.is_set():
                break
        if self._stop.is_set():
            raise Aborted("stopped")

    def _await_step(self, unit: str, upcoming: str) -> None:
        """In step mode, wait at this boundary until the operator lets the agent on."""
        with self._step_lock:
            if self._stepping != unit:
                return
            if self._permits == 0:
                self._emit(StepWaiting(session_id=self.session_id, unit=unit, upcoming=upcoming))
            while self._stepping == unit and self._permits == 0:
                if self._stop.is_set():
                    raise Aborted("stopped")
                self._step_lock.wait(0.1)
            if self._stepping == unit:
                self._permits -= 1

    def _emit(self, event: RuntimeEvent) -> None:
        if self.listener is not None:
            self.listener(event)
