"""The run: a session opened (new, or resumed from its last complete tick), its ticks run
until it completes, fails, is truncated or is stopped, and how it ended stored."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from agents import blocks
from agents.approval import Aborted
from agents.backends.base import BackendError, ContextOverflowError
from agents.events import SessionStarted
from agents.runtime.context import Truncated
from agents.runtime.recall import MEMORY_SYNC_SECONDS
from agents.runtime.session_task import task_snapshot
from agents.runtime.tick import Finished, TickSteps
from agents.sandbox import SandboxUnavailable, sandbox_status
from agents.tasks import seed_workdir
from storage import NodeStatus, SessionStatus

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


class Runtime(TickSteps):
    """Runs one session of `task` against `backend`, storing it in `store`.

    Built in layers, each in its own module: `RuntimeControl` (state, stop, pause, step),
    `Recording` (the store and the listener), `Sampling` and `KernelHost` (the model and
    the sandbox), `GateSteps` (the action and the approval gate), `MemoryRecall`,
    `TickSteps` (one tick) and, here, the run."""

    def run(self) -> Outcome:
        """Run the session until it completes, fails, is truncated or is stopped.
        Raises `SandboxUnavailable` (before anything is stored) when code cannot run
        safely, and ValueError when a session to resume has nothing to resume from."""
        try:
            self._open()
        except BaseException as exc:
            if self._kernel is not None:
                self._kernel.close()
            stopping = self._stop.is_set() or isinstance(exc, KeyboardInterrupt)
            if stopping and not isinstance(exc, SandboxUnavailable):
                # stopped while starting (the kernel is closed under it): aborted, resumable
                stopped = self._stop_why or stop_reason(exc)
                if self.session_id:
                    self._set_status(SessionStatus.ABORTED, stopped)
                message = self._summary(SessionStatus.ABORTED, stopped)
                return Outcome(self.session_id, SessionStatus.ABORTED, message, stopped)
            if self.session_id:
                self._set_status(SessionStatus.FAILED, str(exc))
            raise
        status, reason, error = SessionStatus.FAILED, None, None
        try:
            status, reason = self._loop()
        except (Aborted, KeyboardInterrupt) as exc:
            status, reason = SessionStatus.ABORTED, self._stop_why or stop_reason(exc)
        except ContextOverflowError as exc:  # this session's own: the backend is fine
            status, reason = SessionStatus.TRUNCATED, f"the context is full: {exc}"
        except BackendError as exc:
            status, reason, error = SessionStatus.FAILED, f"model backend: {exc}", exc
        finally:
            if self._kernel is not None:
                self._kernel.close()
            self._set_status(status, reason)
            if status is not SessionStatus.ABORTED:  # index this session for the next ones
                self._sync_memory(MEMORY_SYNC_SECONDS)
        message = self.finish_message or self.last_message or self._summary(status, reason)
        return Outcome(self.session_id, status, message, reason, self.ticks_run, self.tokens, error)

    def _summary(self, status: SessionStatus, reason: str | None) -> str:
        passed, total = self.task_passed
        checks = f"; {passed}/{total} task checks passed" if total else ""
        why = f" ({reason})" if reason else ""
        return f"session {self.session_id} {status.value} after {self.ticks_run} ticks{checks}{why}"

    def _open(self) -> None:
        if not self.options.unsafe_no_sandbox:
            status = sandbox_status()
            if not status.ok:
                raise SandboxUnavailable(f"the sandbox is unavailable: {status.detail}", status.fix)
        if self.resume_id is None:
            session = self.store.create_session(
                self.task.prompt,
                title=self.task.title,
                backend=self.backend.name,
                model=self.backend.model,
                adapter=self.backend.active_adapter,
                settings={"task": task_snapshot(self.task), "run": self.options.snapshot()},
            )
            self.session_id = session.id
            self._announce()
            self._first_start()
        elif not self.store.count_nodes(self.resume_id):
            # stopped before its first block: resuming it is starting it
            self.session_id = self.resume_id
            self._announce()
            self._set_status(SessionStatus.RUNNING, "resumed")
            self._first_start()
        else:
            self.session_id = self.resume_id
            self._announce()
            self._tick = self._load_path()
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._set_status(SessionStatus.RUNNING, "resumed")
            self._start_kernel()

    def _announce(self) -> None:
        """The session's first line: the model, where it runs, the sampling choices."""
        from agents.backends.offline import model_label

        backend = self.backend
        adapter = f" with adapter {backend.active_adapter}" if backend.active_adapter else ""
        text = (
            f"session {self.session_id}: {model_label(backend.model)}{adapter} "
            f"({backend.name}, {backend.device}); {self.options.describe()}"
        )
        self._emit(
            SessionStarted(session_id=self.session_id, text=text, options=self.options.snapshot())
        )

    def _first_start(self) -> None:
        if self.resume_id is None:  # a session resumed before its first block keeps its own
            self._set_aside_stale_workdir()
        self.workdir.mkdir(parents=True, exist_ok=True)
        seed_workdir(self.task, self.workdir)
        self._start_kernel()
        self._genesis()
        self._tick = 1

    def _set_aside_stale_workdir(self) -> None:
        """A new session's work directory must start with the task's files only. One left
        by another session of the same id (a store made again, or another store sharing
        the data folder) is moved aside, never deleted, and never seen by this session."""
        folder = self.workdir.parent
        if not self.workdir.exists() or not any(self.workdir.iterdir()):
            return
        aside = folder.with_name(f"{folder.name}.stale-{int(self.clock() * 1000)}")
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
        self.path = path[: cut + 1]
        return self.path[-1].tick + 1

    def _loop(self) -> tuple[SessionStatus, str | None]:
        start = self._tick
        try:
            for tick in range(start, start + self.options.max_ticks):
                self.ticks_run = tick - start + 1
                self._run_tick(tick)
        except Finished:
            return SessionStatus.COMPLETED, None
        except Truncated as exc:
            return SessionStatus.TRUNCATED, str(exc)
        return SessionStatus.TRUNCATED, f"tick limit ({self.options.max_ticks}) reached"
