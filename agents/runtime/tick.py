"""One tick, in the order `agents.blocks` gives: the task reminder, the observations (and
the operator's chat), recalled memory, the orientation, the action, the option to change
the observation views, the evaluation, and the outcome with its reward."""

from __future__ import annotations

import queue
from functools import partial

from agents import blocks, forms, prompting, ranking
from agents.blocks import GENESIS_SCRIPT_TEMPLATE, GENESIS_TEMPLATE
from agents.example import CURRENT as EXAMPLE_VERSION
from agents.example import EXAMPLE_META
from agents.runtime.control import Control, SessionState
from agents.runtime.gate import GateSteps, TickState
from agents.runtime.kernel_host import KernelHost
from agents.runtime.recall import MemoryRecall
from agents.runtime.recording import Recorder
from agents.runtime.results import (
    RUNTIME_TEXT_CHARS,
    clip,
    credit,
    finite,
    passed,
    result_text,
)
from agents.runtime.sampling import Sampler
from agents.runtime.session_task import own_check_name, task_reminder
from agents.sandbox import CallResult, Kernel
from agents.tasks.spec import Task
from storage import Author, EvaluationKind, NewNode, NodeStatus


class Finished(Exception):
    """The agent said it is done, or every task check passed (for a blind task: every one
    of the model's own evaluations, after an action that ran), or the model kept its
    answer (`KEPT`, the session's reason)."""


#: Why a session ended when the model kept its answer (`TickState.kept`).
KEPT = "the model kept its answer: its next action wrote the files as they were"


class TickSteps:
    """One tick, block by block; and the session's first block, the genesis."""

    def __init__(
        self,
        state: SessionState,
        control: Control,
        recorder: Recorder,
        sampler: Sampler,
        kernels: KernelHost,
        action: GateSteps,
        memory: MemoryRecall,
    ) -> None:
        self.state = state
        self.control = control
        self.recorder = recorder
        self.sampler = sampler
        self.kernels = kernels
        self.action = action
        self.memory = memory

    def run_tick(self, tick: int) -> None:
        self.control.await_step("tick", f"tick {tick}")
        state = TickState(tick)
        asks = (
            {prompting.TASK_ASKS_META: dict(self.state.task.asks)} if self.state.task.asks else None
        )
        self.recorder.runtime_block(
            blocks.TASK_REMINDER, task_reminder(self.state.task), tick, meta=asks
        )
        self._observe(tick)
        self.memory.recall(tick)
        self.sampler.generate(blocks.ORIENTATION, tick)
        self.action.act(state)
        if state.kept:  # nothing new was written: nothing new to evaluate
            self._outcome(state)
            return
        if self.state.options.form == forms.CALLBACK:  # observation views are callbacks
            self._option(tick)
        self._evaluate(state)
        self._outcome(state)

    def genesis(self) -> None:
        files = sorted(self.state.task.files)
        listing = ", ".join(files) if files else "(empty)"
        kernel = self.kernels.kernel
        inside = kernel.workdir_inside if kernel is not None else str(self.state.workdir)
        template = (
            GENESIS_SCRIPT_TEMPLATE if self.state.options.form == forms.SCRIPT else GENESIS_TEMPLATE
        )
        text = template.format(
            title=self.state.task.title,
            prompt=self.state.task.prompt.strip(),
            workdir=inside,
            files=listing,
            checks=_checked_by(self.state.task),
        )
        # the example tick is written in callback form
        example = self.state.options.example and self.state.options.form == forms.CALLBACK
        extra = {EXAMPLE_META: EXAMPLE_VERSION} if example else {}
        self.recorder.runtime_block(blocks.GENESIS, text, 0, meta=extra)

    def _observe(self, tick: int) -> None:
        views = self.kernels.kernel_call(
            lambda k: k.render_observations(), lambda failed: [("observation views", failed)]
        )
        for title, result in views:
            node = self.recorder.runtime_block(
                blocks.OBSERVATION,
                result_text(result) if result.ok else f"[error] {result.error}",
                tick,
                title=title,
            )
            self.recorder.record_evaluation(node, title, EvaluationKind.OBSERVATION, result)
        while True:
            try:
                message = self.control.chat.get_nowait()
            except queue.Empty:
                break
            self.recorder.runtime_block(blocks.OBSERVATION, message, tick, title="Operator")

    def _option(self, tick: int) -> None:
        """The runtime asks whether the observation views need to change; when the model
        thinks so, it writes an observation-inference block."""
        header = self.recorder.header(blocks.OPTION, tick)
        asked = f"{ranking.CALIBRATION}#q: {blocks.OPTION_QUESTION}"
        context, collapsed = self.state.window.fit(
            self.state.path, asked + self.state.prompter.overhead, 0
        )
        prompt = (
            context + asked
            if self.state.prompter.style == prompting.DOCUMENT
            else self.state.prompter.question(
                context, "", blocks.OPTION_QUESTION, blocks.OPTION, self.state.path, collapsed
            )
        )
        log_odds = finite(self.state.backend.score_yes_no([prompt])[0])
        answer = "Yes." if log_odds > 0 else "No."
        self.recorder.store_block(
            NewNode(
                kind=blocks.OPTION,
                text=answer,
                tick=tick,
                author=Author.RUNTIME,
                status=NodeStatus.CHOSEN,
                score=log_odds,
                score_parts={"evaluator": log_odds},
                meta={**header.meta(), "q": blocks.OPTION_QUESTION, "collapsed": collapsed},
            )
        )
        if log_odds > 0:
            node, _ = self.sampler.generate(blocks.OBSERVATION_INFERENCE, tick)
            result = self.kernels.kernel_call(
                lambda k: k.exec_block(node.text, name="observation-inference")
            )
            self.kernels.heard(result)
            self.recorder.update(
                node, NodeStatus.EXECUTED if result.ok else NodeStatus.FAILED, result
            )
            if not result.ok:
                self.recorder.runtime_block(blocks.ERROR, result.error or "failed", tick)

    def _evaluate(self, state: TickState) -> None:
        node, _ = self.sampler.generate(blocks.EVALUATION, state.tick)

        def define(kernel: Kernel) -> CallResult:
            kernel.clear("evaluation")
            code = forms.kernel_code(
                blocks.EVALUATION, self.state.options.form, node.text, self.kernels.script_timeout
            )
            return kernel.exec_block(code, name="evaluation")

        result = self.kernels.kernel_call(define)
        self.kernels.heard(result)
        self.recorder.update(node, NodeStatus.EXECUTED if result.ok else NodeStatus.FAILED, result)
        if result.ok:
            state.evaluations = list(dict.fromkeys(result.registered.get("evaluation", [])))
        else:
            self.recorder.runtime_block(blocks.ERROR, result.error or "failed", state.tick)

    def _outcome(self, state: TickState) -> None:
        rows: list[tuple[str, str]] = []
        if state.action is not None:
            title = state.action.node.meta.get("title") or "action"
            rows.append((f"action: {title}", clip(result_text(state.action.result))))
        else:
            rows.append(("action", "no action ran this tick"))
        # The model's own evaluations run in its kernel, as it wrote them; one titled like
        # a check of the task is shown as the model's. The task's checks run after them, in
        # a kernel of their own (`_task_checks`): their verdict is the task's.
        results: list[tuple[str, CallResult, bool]] = []
        for title in state.evaluations:
            result = self.kernels.kernel_call(partial(_call_evaluation, name=title))
            self.kernels.heard(result)
            name = own_check_name(title, self.state.task)
            results.append((name, result, False))
        results = [(name, result, True) for name, result in self.kernels.task_checks()] + results
        for name, result, is_check in results:
            if is_check and self.state.task.blind:
                continue  # recorded below, never shown to the model
            text = result_text(result) if result.ok else f"[error] {result.error}"
            rows.append((name, clip(text, RUNTIME_TEXT_CHARS // 4)))
        verdicts = [(name, passed(result), is_check) for name, result, is_check in results]
        passes = sum(1 for _, ok, _ in verdicts if ok)
        checks = [ok for _, ok, is_check in verdicts if is_check]
        self.state.task_passed = (sum(checks), len(checks))
        fraction = sum(credit(r) for _, r, _ in results) / len(results) if results else 0.0
        reward = max(0.0, 0.5 * fraction - 0.1 * state.failed_attempts)

        header = self.recorder.header(blocks.OUTCOME, state.tick)
        table = blocks.outcome_table(rows)
        asked = ranking.question_prompt(header.text(), table, blocks.OUTCOME_QUESTION)
        context, collapsed = self.state.window.fit(
            self.state.path, asked + self.state.prompter.overhead, 0
        )
        question = self.state.prompter.question(
            context + header.text(),
            table,
            blocks.OUTCOME_QUESTION,
            blocks.OUTCOME,
            self.state.path,
            collapsed,
        )
        log_odds = finite(self.state.backend.score_yes_no([question])[0])
        node = self.recorder.store_block(
            NewNode(
                kind=blocks.OUTCOME,
                text=table,
                tick=state.tick,
                author=Author.RUNTIME,
                status=NodeStatus.CHOSEN,
                score=reward,
                score_parts={"evaluator": log_odds},
                meta={
                    **header.meta(),
                    "q": blocks.OUTCOME_QUESTION,
                    "collapsed": collapsed,
                    "table": [list(row) for row in rows],
                    "passed": passes,
                    "total": len(results),
                    "task_passed": self.state.task_passed[0],
                    "task_total": self.state.task_passed[1],
                    "failed_attempts": state.failed_attempts,
                    "reward": reward,
                },
            )
        )
        for name, result, _ in results:
            self.recorder.record_evaluation(node, name, EvaluationKind.CALLBACK, result)
        self.recorder.record(
            node,
            blocks.OUTCOME_QUESTION,
            EvaluationKind.LOGIT,
            result=log_odds,
            passed=log_odds > 0,
        )
        if self.state.finish_message is not None:
            raise Finished
        if state.kept:
            raise Finished(KEPT)
        if self.state.task.blind:
            # the task's verdict is hidden: the model's own evaluations say when it is done
            own = [ok for _, ok, is_check in verdicts if not is_check]
            if own and all(own) and state.action is not None and state.action.result.ok:
                raise Finished
        elif checks and all(checks):
            raise Finished


def _checked_by(task: Task) -> str:
    if task.blind:
        return (
            "hidden tests, whose results you will not see; your own evaluations (the "
            "docstring's examples, say) decide when the work is done"
        )
    return ", ".join(task.check_names) or "(none: the operator judges)"


def _call_evaluation(kernel: Kernel, name: str) -> CallResult:
    return kernel.call_evaluation(name)
