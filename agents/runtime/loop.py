"""The run: a session opened (new, or resumed from its last complete tick), its ticks run
until it completes, fails, is truncated or is stopped, and how it ended stored."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agents import blocks
from agents.approval import Aborted, Asker, Gate
from agents.backends.base import BackendError, ContextOverflowError, Interrupted, interruptible
from agents.events import Listener, SessionStarted
from agents.memory import Memory
from agents.processes import OWNER, this_process
from agents.runtime.context import Truncated
from agents.runtime.control import Control, SessionState
from agents.runtime.gate import GateSteps
from agents.runtime.kernel_host import KernelHost
from agents.runtime.options import RunOptions
from agents.runtime.recall import MEMORY_SYNC_SECONDS, MemoryRecall
from agents.runtime.recording import Recorder
from agents.runtime.sampling import Sampler
from agents.runtime.session_task import task_snapshot
from agents.runtime.tick import Finished, TickSteps
from agents.sandbox import SandboxUnavailable, sandbox_status
from agents.tasks import Task, seed_workdir
from storage import Node, NodeStatus, SessionStatus, TraceStore

if TYPE_CHECKING:
    from agents.backends import Backend

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Outcome:
    """How a run ended."""

    session_id: int
    status: SessionStatus
    #: the agent's last word to the operator, or a summary of how it ended
    message: str
    #: why it ended, when not completed
    reason: str | None = None
    ticks: int = 0
    tokens: int = 0
    backend_error: BackendError | None = None


def stop_reason(exc: BaseException) -> str:
    """Why a stop aborted the session: a KeyboardInterrupt raised with a reason says it
    (headless `--query` raises one on SIGTERM: "stopped by SIGTERM"); Ctrl-C and `stop()`
    are the operator."""
    if isinstance(exc, KeyboardInterrupt) and str(exc):
        return str(exc)
    return "stopped by the operator"


class Runtime:
    """Runs one session of `task` against `backend`, storing it in `store`.

    Composed of parts it owns, each given the others it uses: the session's state and
    its control (`control`: stop, pause, step, chat, from any thread), the recorder (the
    store and the listener), the sampler (the model's blocks), the kernel host (the
    sandbox), the action's steps through the approval gate (`gate`), the retrieval memory
    and one tick's steps; the run itself is here."""

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
        self.state = SessionState(
            store, backend, task, options, sessions_dir, clock, listener=listener
        )
        self.resume_id = resume
        self.control = Control(self.state)
        self.recorder = Recorder(self.state, self.control)
        self.sampler = Sampler(self.state, self.control, self.recorder)
        self.kernels = KernelHost(self.state, self.control)
        self.gate = Gate(options.approval, options.approval_threshold, asker)
        self.action = GateSteps(
            self.state, self.control, self.recorder, self.sampler, self.kernels, self.gate
        )
        self.recall = MemoryRecall(self.state, self.control, self.recorder, memory)
        self.ticks = TickSteps(
            self.state,
            self.control,
            self.recorder,
            self.sampler,
            self.kernels,
            self.action,
            self.recall,
        )

    # -- what callers read ------------------------------------------------------------------

    @property
    def store(self) -> TraceStore:
        return self.state.store

    @property
    def options(self) -> RunOptions:
        return self.state.options

    @property
    def session_id(self) -> int:
        return self.state.session_id

    @property
    def path(self) -> list[Node]:
        return self.state.path

    @property
    def tokens(self) -> int:
        return self.state.tokens

    @property
    def task_passed(self) -> tuple[int, int]:
        return self.state.task_passed

    @property
    def sessions_dir(self) -> Path:
        return self.state.sessions_dir

    @property
    def workdir(self) -> Path:
        return self.state.workdir

    @property
    def memory(self) -> Memory | None:
        """The retrieval memory the session recalls from (None: off, or not loaded yet)."""
        return self.recall.memory

    @memory.setter
    def memory(self, memory: Memory | None) -> None:
        self.recall.memory = memory

    @property
    def listener(self) -> Listener | None:
        return self.state.listener

    @listener.setter
    def listener(self, listener: Listener | None) -> None:
        self.state.listener = listener

    # -- control (any thread) ---------------------------------------------------------------

    def stop(self, reason: str | None = None) -> None:
        """Abort the session at once: the model's forward pass under way ends at its next
        layer, a wait for the operator or a step key ends, code running in the sandbox is
        killed. `reason` is stored as the session's (default: "stopped by the operator")."""
        self.control.stop(reason)
        self.kernels.close()

    def pause(self) -> None:
        self.control.pause()

    def unpause(self) -> None:
        self.control.unpause()

    def set_stepping(self, unit: str | None) -> None:
        """Step mode: with `"block"` the agent waits for `step()` before each block, with
        `"tick"` before each tick; `None` lets it run until it needs the operator."""
        self.control.set_stepping(unit)

    def step(self) -> None:
        """Let a stepping agent make one more block (or tick)."""
        self.control.step()

    @property
    def stepping(self) -> str | None:
        return self.control.stepping

    def passes_checks(self, action: str, *, truncated: bool = False) -> bool:
        """Whether `action` would do the task: run on a copy of the work dir as it is now,
        in a kernel of its own, every one of the task's checks passes after it. Nothing of
        the session changes (see `KernelHost.passes_checks`)."""
        return self.kernels.passes_checks(action, truncated=truncated)

    def post_message(self, text: str) -> None:
        """An operator chat message: it enters the context as an observation block at the
        next tick boundary."""
        self.control.post_message(text)

    # -- the run ------------------------------------------------------------------------------

    def run(self) -> Outcome:
        """Run the session until it completes, fails, is truncated or is stopped.
        Raises `SandboxUnavailable` (before anything is stored) when code cannot run
        safely, and ValueError when a session to resume has nothing to resume from."""
        # a stop cuts the model's forward pass under way (a CPU takes seconds for one)
        interrupt = self.control.stopped.is_set
        try:
            with interruptible(interrupt):
                self._open()
        except BaseException as exc:
            if self.kernels.kernel is not None:
                self.kernels.kernel.close()
            stopping = self.control.stopped.is_set() or isinstance(exc, KeyboardInterrupt)
            if stopping and not isinstance(exc, SandboxUnavailable):
                # stopped while starting (the kernel is closed under it): aborted, resumable
                stopped = self.control.stop_why or stop_reason(exc)
                if self.session_id:
                    self.recorder.set_status(SessionStatus.ABORTED, stopped)
                message = self._summary(SessionStatus.ABORTED, stopped)
                return Outcome(self.session_id, SessionStatus.ABORTED, message, stopped)
            if self.session_id:
                self.recorder.set_status(SessionStatus.FAILED, str(exc))
            raise
        status, reason, error = SessionStatus.FAILED, None, None
        try:
            with interruptible(interrupt):
                status, reason = self._loop()
        except (Aborted, Interrupted, KeyboardInterrupt) as exc:
            status, reason = SessionStatus.ABORTED, self.control.stop_why or stop_reason(exc)
        except ContextOverflowError as exc:  # this session's own: the backend is fine
            status, reason = SessionStatus.TRUNCATED, f"the context is full: {exc}"
        except BackendError as exc:
            status, reason, error = SessionStatus.FAILED, f"model backend: {exc}", exc
        finally:
            if self.kernels.kernel is not None:
                self.kernels.kernel.close()
            self.recorder.set_status(status, reason)
            if status is not SessionStatus.ABORTED:  # index this session for the next ones
                self.recall.sync(MEMORY_SYNC_SECONDS)
        message = (
            self.state.finish_message or self.state.last_message or self._summary(status, reason)
        )
        return Outcome(
            self.session_id, status, message, reason, self.state.ticks_run, self.tokens, error
        )

    def _summary(self, status: SessionStatus, reason: str | None) -> str:
        passed, total = self.task_passed
        checks = f"; {passed}/{total} task checks passed" if total else ""
        why = f" ({reason})" if reason else ""
        return f"session {self.session_id} {status.value} after {self.state.ticks_run} ticks{checks}{why}"

    def _open(self) -> None:
        if not self.options.unsafe_no_sandbox:
            status = sandbox_status()
            if not status.ok:
                raise SandboxUnavailable(f"the sandbox is unavailable: {status.detail}", status.fix)
        if self.resume_id is None:
            session = self.store.create_session(
                self.state.task.prompt,
                title=self.state.task.title,
                backend=self.state.backend.name,
                model=self.state.backend.model,
                adapter=self.state.backend.active_adapter,
                settings={
                    "task": task_snapshot(self.state.task),
                    "run": self.options.snapshot(),
                    OWNER: this_process(),
                },
            )
            self.state.session_id = session.id
            self._announce()
            self._first_start()
        elif not self.store.count_nodes(self.resume_id):
            # stopped before its first block: resuming it is starting it
            self.state.session_id = self.resume_id
            self._announce()
            self.recorder.set_status(SessionStatus.RUNNING, "resumed", claim=True)
            self._first_start()
        else:
            self.state.session_id = self.resume_id
            self._announce()
            self.state.next_tick = self._load_path()
            self.workdir.mkdir(parents=True, exist_ok=True)
            self.recorder.set_status(SessionStatus.RUNNING, "resumed", claim=True)
            self.kernels.start_kernel()

    def _announce(self) -> None:
        """The session's first line: the model, where it runs, the sampling choices."""
        from agents.backends.offline import model_label

        backend = self.state.backend
        adapter = f" with adapter {backend.active_adapter}" if backend.active_adapter else ""
        text = (
            f"session {self.session_id}: {model_label(backend.model)}{adapter} "
            f"({backend.name}, {backend.device}); {self.options.describe()}"
        )
        self.state.emit(
            SessionStarted(session_id=self.session_id, text=text, options=self.options.snapshot())
        )

    def _first_start(self) -> None:
        if self.resume_id is None:  # a session resumed before its first block keeps its own
            self._set_aside_stale_workdir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        seed_workdir(self.state.task, self.workdir)
        self.kernels.start_kernel()
        self.ticks.genesis()
        self.state.next_tick = 1

    def _set_aside_stale_workdir(self) -> None:
        """A new session's work directory must start with the task's files only. One left
        by another session of the same id (a store made again, or another store sharing
        the data folder) is moved aside, never deleted, and never seen by this session."""
        folder = self.workdir.parent
        if not self.workdir.exists() or not any(self.workdir.iterdir()):
            return
        aside = folder.with_name(f"{folder.name}.stale-{int(self.state.clock() * 1000)}")
        folder.rename(aside)
        log.warning(
            "session %s: its work directory held another session's files; moved to %s",
            self.session_id,
            aside,
        )

    def _load_path(self) -> int:
        """The path a resumed session continues from: up to its last complete tick (a
        half-done tick stays in the tree as a branch). Returns the next tick."""
        nodes = self.store.tree(self.session_id)
        live = [n for n in nodes if n.status is not NodeStatus.ALTERNATE]
        if not live:
            raise ValueError(f"session {self.session_id} has no blocks to resume from")
        path = self.store.path(live[-1].id)
        cut = max(i for i, n in enumerate(path) if n.kind in (blocks.OUTCOME, blocks.GENESIS))
        self.state.path = path[: cut + 1]
        return self.path[-1].tick + 1

    def _loop(self) -> tuple[SessionStatus, str | None]:
        start = self.state.next_tick
        try:
            for tick in range(start, start + self.options.max_ticks):
                self.state.ticks_run = tick - start + 1
                self.ticks.run_tick(tick)
        except Finished as exc:
            return SessionStatus.COMPLETED, str(exc) or None
        except Truncated as exc:
            return SessionStatus.TRUNCATED, str(exc)
        return SessionStatus.TRUNCATED, f"tick limit ({self.options.max_ticks}) reached"
