"""The session's sandboxed kernel: started (and restored after a restart) with what the
path set up, called so that model code can fail a call but never the session, and the
agent's words to the operator picked out of what it returned."""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents import blocks, forms
from agents.approval import Aborted
from agents.events import AgentMessage
from agents.runtime.control import Control, SessionState
from agents.runtime.results import clip, passed
from agents.sandbox import CallResult, Kernel, Limits, SandboxError
from agents.tasks import Task
from storage import Node, NodeStatus

log = logging.getLogger(__name__)


class KernelHost:
    """The session's sandboxed kernel, and the task checks' own."""

    def __init__(self, state: SessionState, control: Control) -> None:
        self.state = state
        self.control = control
        self.kernel: Kernel | None = None
        #: the task's checks' own kernel, while they run
        self.checker: Kernel | None = None

    def close(self) -> None:
        """Close both kernels (a stop from any thread: what runs in them ends now)."""
        for kernel in (self.kernel, self.checker):
            if kernel is not None:
                kernel.close()

    def limits(self) -> Limits:
        return Limits(
            wall_seconds=self.state.options.action_timeout,
            cpu_seconds=max(1, math.ceil(self.state.options.action_timeout)),
            workdir_bytes=self.state.options.workdir_bytes,
            workdir_files=self.state.options.workdir_files,
        )

    @property
    def script_timeout(self) -> float:
        """Seconds a script block may run: its callback's time, less a margin to report."""
        return max(1.0, self.state.options.action_timeout - 2)

    def start_kernel(self) -> None:
        self.kernel = Kernel(
            self.state.workdir, limits=self.limits(), unsafe=self.state.options.unsafe_no_sandbox
        )
        self.kernel.start()
        self.restore_kernel()

    def task_checks(self) -> list[tuple[str, CallResult]]:
        """The task's checks, each with a verdict the model cannot forge: they run in a
        fresh kernel of their own (nothing of the model's namespace, a channel only it and
        the console hold), over the work dir as the model's code left it, read-only, while
        every process of the model's kernel is stopped."""
        names = self.state.task.check_names
        if not names:
            return []
        self.control.checkpoint()
        model = self.kernel
        paused = model.paused() if model is not None and model.alive else contextlib.nullcontext()
        checker = Kernel(
            self.state.workdir,
            limits=self.limits(),
            unsafe=self.state.options.unsafe_no_sandbox,
            read_only=True,
        )
        self.checker = checker
        try:
            with paused, checker:
                return check_work(checker, self.state.task)
        except SandboxError as exc:
            if self.control.stopped.is_set():
                raise Aborted("stopped") from None
            failed = CallResult(
                ok=False, error=f"the task's checks could not run: {exc}", killed="crashed"
            )
            return [(name, failed) for name in names]
        finally:
            self.checker = None
            if self.control.stopped.is_set():
                raise Aborted("stopped")

    def passes_checks(self, text: str, *, truncated: bool = False) -> bool:
        """Whether action `text` (cut by the token limit: `truncated`), run as `run_action`
        runs it but in a kernel of its own on a copy of the work dir as it is now, leaves
        work that every one of the task's checks passes (each run as `task_checks` runs
        them). The session's kernel and files are untouched: how a scripted operator tells
        right work from its own wording of it."""
        if not self.state.task.check_names:
            return False
        form, unsafe = self.state.options.form, self.state.options.unsafe_no_sandbox
        code = forms.kernel_code(
            blocks.ACTION, form, text, self.script_timeout, truncated=truncated
        )
        with tempfile.TemporaryDirectory(prefix="agent-console-trial-") as folder:
            copy = Path(folder) / "work"
            shutil.copytree(self.state.workdir, copy, symlinks=True)
            try:
                with Kernel(copy, limits=self.limits(), unsafe=unsafe) as kernel:
                    if not define_and_call_action(kernel, code, "action (on a copy)").ok:
                        return False
                with Kernel(copy, limits=self.limits(), unsafe=unsafe, read_only=True) as checker:
                    return all(passed(result) for _, result in check_work(checker, self.state.task))
            except SandboxError as exc:
                log.warning("session %s: an action's trial failed: %s", self.state.session_id, exc)
                return False

    def restore_kernel(self) -> None:
        """Re-run what later ticks rely on: the observation views the path set up."""
        assert self.kernel is not None
        if self.state.options.form == forms.SCRIPT:
            self.kernel.exec_block(forms.FILES_VIEW, name="the work directory view")
        for node in self.state.path:
            if node.kind == blocks.OBSERVATION_INFERENCE and node.status is NodeStatus.EXECUTED:
                self.kernel.exec_block(node.text, name="observation-inference (restored)")

    def kernel_call(
        self,
        call: Callable[[Kernel], Any],
        failed: Callable[[CallResult], Any] = lambda result: result,
    ) -> Any:
        """A kernel call; a kernel that died (timeout, memory, crash) is restarted and
        restored before the next call. A stop while it ran aborts the session.

        The last line of defence: whatever the call raises (the sandbox's own error, say,
        for a forged answer), model code fails this call, never the session: the kernel
        is restarted and `failed` makes the call's answer from a failed CallResult."""
        self.control.checkpoint()
        kernel = self.kernel
        assert kernel is not None
        try:
            result = call(kernel)
        except Exception as exc:
            if self.control.stopped.is_set():  # stop() closed the kernel under the call
                raise Aborted("stopped") from None
            detail = str(exc) if isinstance(exc, SandboxError) else f"{type(exc).__name__}: {exc}"
            log.warning(
                "session %s: sandbox call failed (%s); restarting it", self.state.session_id, detail
            )
            kernel.restart()
            self.restore_kernel()
            error = f"the sandbox failed: {clip(detail, 300)}; its kernel was restarted"
            return failed(CallResult(ok=False, error=error, killed="crashed"))
        if self.control.stopped.is_set():
            raise Aborted("stopped")
        if not kernel.alive:
            log.warning("session %s: sandbox kernel died; restarting it", self.state.session_id)
            kernel.restart()
            self.restore_kernel()
        return result

    def heard(self, result: CallResult) -> None:
        for message in result.messages:
            self.state.last_message = message
            self.state.emit(AgentMessage(session_id=self.state.session_id, text=message))
        if result.finished is not None:
            self.state.finish_message = result.finished or self.state.last_message or "done"
            self.state.emit(
                AgentMessage(
                    session_id=self.state.session_id, text=self.state.finish_message, finished=True
                )
            )

    def run_action(self, node: Node) -> CallResult:
        """Run an approved action block: define it, then call the action it added."""

        def call(kernel: Kernel) -> CallResult:
            kernel.clear("action")
            code = forms.kernel_code(
                blocks.ACTION,
                self.state.options.form,
                node.text,
                self.script_timeout,
                truncated=node.truncated,
            )
            return define_and_call_action(kernel, code, f"action {node.meta.get('index', '')}")

        result = self.kernel_call(call)
        self.heard(result)
        return result


def define_and_call_action(kernel: Kernel, code: str, name: str) -> CallResult:
    """Run an action block's `code` in `kernel`, then call the action it added."""
    defined = kernel.exec_block(code, name=name)
    if not defined.ok:
        return defined
    titles = defined.registered.get("action", [])
    if not titles:
        return CallResult(
            ok=False,
            error="the action block added no action: call self.add_action(title, function)",
            stdout=defined.stdout,
            stderr=defined.stderr,
            messages=defined.messages,
            duration=defined.duration,
        )
    ran = kernel.call_action(titles[-1])
    ran.stdout = defined.stdout + ran.stdout
    ran.stderr = defined.stderr + ran.stderr
    ran.messages = defined.messages + ran.messages
    ran.finished = ran.finished or defined.finished
    return ran


def check_work(checker: Kernel, task: Task) -> list[tuple[str, CallResult]]:
    """Each of the task's checks, by name, with its result, run in `checker`."""
    names = task.check_names
    defined = checker.exec_block(task.checks, name="task checks")
    if not defined.ok:
        failed = CallResult(ok=False, error=f"the task's checks: {defined.error}")
        return [(name, failed) for name in names]
    return [(name, checker.call_evaluation(name)) for name in names]
