"""The session's sandboxed kernel: started (and restored after a restart) with what the
path set up, called so that model code can fail a call but never the session, and the
agent's words to the operator picked out of what it returned."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from typing import Any

from agents import blocks, forms
from agents.approval import Aborted
from agents.events import AgentMessage
from agents.runtime.control import RuntimeControl
from agents.runtime.results import clip
from agents.sandbox import CallResult, Kernel, Limits, SandboxError
from storage import Node, NodeStatus

log = logging.getLogger(__name__)


class KernelHost(RuntimeControl):
    def _limits(self) -> Limits:
        return Limits(
            wall_seconds=self.options.action_timeout,
            cpu_seconds=max(1, math.ceil(self.options.action_timeout)),
            workdir_bytes=self.options.workdir_bytes,
            workdir_files=self.options.workdir_files,
        )

    @property
    def _script_timeout(self) -> float:
        """Seconds a script block may run: its callback's time, less a margin to report."""
        return max(1.0, self.options.action_timeout - 2)

    def _start_kernel(self) -> None:
        self._kernel = Kernel(
            self.workdir, limits=self._limits(), unsafe=self.options.unsafe_no_sandbox
        )
        self._kernel.start()
        self._restore_kernel()

    def _task_checks(self) -> list[tuple[str, CallResult]]:
        """The task's checks, each with a verdict the model cannot forge: they run in a
        fresh kernel of their own (nothing of the model's namespace, a channel only it and
        the console hold), over the work dir as the model's code left it, read-only, while
        every process of the model's kernel is stopped."""
        names = self.task.check_names
        if not names:
            return []
        self._checkpoint()
        model = self._kernel
        paused = model.paused() if model is not None and model.alive else contextlib.nullcontext()
        checker = Kernel(
            self.workdir,
            limits=self._limits(),
            unsafe=self.options.unsafe_no_sandbox,
            read_only=True,
        )
        self._checker = checker
        try:
            with paused, checker:
                defined = checker.exec_block(self.task.checks, name="task checks")
                if not defined.ok:
                    failed = CallResult(ok=False, error=f"the task's checks: {defined.error}")
                    return [(name, failed) for name in names]
                return [(name, checker.call_evaluation(name)) for name in names]
        except SandboxError as exc:
            if self._stop.is_set():
                raise Aborted("stopped") from None
            failed = CallResult(
                ok=False, error=f"the task's checks could not run: {exc}", killed="crashed"
            )
            return [(name, failed) for name in names]
        finally:
            self._checker = None
            if self._stop.is_set():
                raise Aborted("stopped")

    def _restore_kernel(self) -> None:
        """Re-run what later ticks rely on: the observation views the path set up."""
        assert self._kernel is not None
        if self.options.form == forms.SCRIPT:
            self._kernel.exec_block(forms.FILES_VIEW, name="the work directory view")
        for node in self.path:
            if node.kind == blocks.OBSERVATION_INFERENCE and node.status is NodeStatus.EXECUTED:
                self._kernel.exec_block(node.text, name="observation-inference (restored)")

    def _kernel_call(
        self,
        call: Callable[[Kernel], Any],
        failed: Callable[[CallResult], Any] = lambda result: result,
    ) -> Any:
        """A kernel call; a kernel that died (timeout, memory, crash) is restarted and
        restored before the next call. A stop while it ran aborts the session.

        The last line of defence: whatever the call raises (the sandbox's own error, say,
        for a forged answer), model code fails this call, never the session: the kernel
        is restarted and `failed` makes the call's answer from a failed CallResult."""
        self._checkpoint()
        kernel = self._kernel
        assert kernel is not None
        try:
            result = call(kernel)
        except Exception as exc:
            if self._stop.is_set():  # stop() closed the kernel under the call
                raise Aborted("stopped") from None
            detail = str(exc) if isinstance(exc, SandboxError) else f"{type(exc).__name__}: {exc}"
            log.warning(
                "session %s: sandbox call failed (%s); restarting it", self.session_id, detail
            )
            kernel.restart()
            self._restore_kernel()
            error = f"the sandbox failed: {clip(detail, 300)}; its kernel was restarted"
            return failed(CallResult(ok=False, error=error, killed="crashed"))
        if self._stop.is_set():
            raise Aborted("stopped")
        if not kernel.alive:
            log.warning("session %s: sandbox kernel died; restarting it", self.session_id)
            kernel.restart()
            self._restore_kernel()
        return result

    def _heard(self, result: CallResult) -> None:
        for message in result.messages:
            self.last_message = message
            self._emit(AgentMessage(session_id=self.session_id, text=message))
        if result.finished is not None:
            self.finish_message = result.finished or self.last_message or "done"
            self._emit(
                AgentMessage(session_id=self.session_id, text=self.finish_message, finished=True)
            )

    def _run_action(self, node: Node) -> CallResult:
        """Run an approved action block: define it, then call the action it added."""

        def call(kernel: Kernel) -> CallResult:
            kernel.clear("action")
            code = forms.kernel_code(
                blocks.ACTION,
                self.options.form,
                node.text,
                self._script_timeout,
                truncated=node.truncated,
            )
            defined = kernel.exec_block(code, name=f"action {node.meta.get('index', '')}")
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

        result = self._kernel_call(call)
        self._heard(result)
        return result
