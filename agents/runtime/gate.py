"""A tick's action: sampled with its expectation, put to the approval gate, the decision
stored and applied (approve, reject with feedback, an operator's edit, a picked
alternate, sample again), then run; a failed run is followed by a debug block and another
try."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents import blocks, forms, ranking
from agents.approval import Answer, ApprovalRequest, Gate, Policy
from agents.backends.base import ContextOverflowError
from agents.events import ApprovalNeeded
from agents.runtime.context import earlier_texts, prefix_before
from agents.runtime.control import Control, SessionState
from agents.runtime.kernel_host import KernelHost
from agents.runtime.recording import Recorder
from agents.runtime.sampling import Sampler
from agents.sandbox import CallResult
from storage import Actor, Author, NewNode, Node, NodeStatus, SessionStatus, Verdict

#: An operator's edit longer than this shows in the context cut to it (the store keeps
#: it whole): a pasted megabyte must not end the session.
OPERATOR_CONTEXT_CHARS = 8000
#: the most room a retry after a cut file gets, in times the options' `block_tokens`
MAX_ROOM = 4


class Regenerate:
    """The operator asked for the action to be sampled again."""


@dataclass(frozen=True, slots=True)
class Rejected:
    """The gate refused the action; nothing ran."""

    reason: str


def last_line(error: str) -> str:
    """A traceback's last line (`NameError: name 'x' is not defined`), cut to a line."""
    lines = [line.strip() for line in error.strip().splitlines() if line.strip()]
    line = lines[-1] if lines else "no error text"
    return line if len(line) <= 200 else line[:199] + "…"


@dataclass(slots=True)
class Attempt:
    node: Node
    result: CallResult


@dataclass(slots=True)
class TickState:
    """What a tick has done so far: its action's tries, and the evaluations it defined."""

    tick: int
    failed_attempts: int = 0
    action: Attempt | None = None
    evaluations: list[str] = field(default_factory=list)
    #: the model kept its answer: the action it chose wrote the files as they already
    #: were (the tick and the session end there)
    kept: bool = False


class GateSteps:
    """A tick's action: sampled, put to the approval gate, run."""

    def __init__(
        self,
        state: SessionState,
        control: Control,
        recorder: Recorder,
        sampler: Sampler,
        kernels: KernelHost,
        gate: Gate,
    ) -> None:
        self.state = state
        self.control = control
        self.recorder = recorder
        self.sampler = sampler
        self.kernels = kernels
        self.gate = gate

    def act(self, tick_state: TickState) -> None:
        attempts = 0
        #: why the last try did not do, for the next request to say
        missed: str | None = None
        #: the room for the next try's action (None: the options')
        room: int | None = None
        while attempts < self.state.options.attempts:
            action, alternates = self.sampler.generate(
                blocks.ACTION, tick_state.tick, block_tokens=room
            )
            if self.state.options.choose_by_checks and self.state.task.check_names:
                action, alternates = self._choose_by_checks(action, alternates)
            expectation, _ = self.sampler.generate(blocks.EXPECTATION, tick_state.tick)
            retry = (
                f"try {attempts + 1} of {self.state.options.attempts}: {missed}" if missed else None
            )
            chosen = self._ask(action, expectation, alternates, tick_state.tick, retry)
            if isinstance(chosen, Regenerate):
                continue  # the operator's call: it costs no attempt
            if isinstance(chosen, Rejected):
                attempts += 1
                missed = f"action #{action.id} was rejected ({chosen.reason})"
                continue
            result = self.kernels.run_action(chosen)
            if result.ok:
                tick_state.action = Attempt(
                    self.recorder.update(chosen, NodeStatus.EXECUTED, result), result
                )
                return
            self.recorder.update(chosen, NodeStatus.FAILED, result)
            tick_state.failed_attempts += 1
            attempts += 1
            error = forms.error_report(result.error or "the action failed")
            missed = f"action #{chosen.id} failed: {last_line(error)}"
            self.recorder.runtime_block(blocks.ERROR, error, tick_state.tick)
            error_text = result.error or ""
            if (
                chosen.author is Author.MODEL
                and forms.NO_CHANGE in error_text
                and (chosen.meta.get("copy") or forms.CUT_NOTE not in error_text)
                and self._answered()
            ):
                # The model wrote its answer again as it is (every candidate repeated an
                # earlier action, the hotter round's too, or the one chosen wrote the
                # files as they are): another try would say it again (the coder did, nine
                # times on HumanEval/20, each padded differently with blank lines).
                # The model's, not the operator's edit. Not before the model has
                # answered: the files are then the task's own
                # (HumanEval/68's first action wrote the stub back; the session ended).
                tick_state.kept = True
                return
            if chosen.author is Author.MODEL and forms.CUT_NOTE in error_text:
                # the limit cut the file before it ended: asked again with the same room,
                # the model writes the same file and is cut again (the coder spent 25
                # minutes so on HumanEval/96); the next try has twice the room, up to
                # MAX_ROOM times the options'
                base = self.state.options.block_tokens
                room = min(2 * (room or base), MAX_ROOM * base)
            # A script's error is its own report: the model writes the next try after it.
            if attempts < self.state.options.attempts and self.state.options.form == forms.CALLBACK:
                self.sampler.generate(blocks.DEBUG, tick_state.tick)

    def _choose_by_checks(
        self, action: Node, alternates: Sequence[Node]
    ) -> tuple[Node, list[Node]]:
        """Every candidate of the action tried against the task's checks on a copy of the
        work dir (`KernelHost.passes_checks`), its verdict kept in its metadata
        (`blocks.CHECKS_META`): the model's choice stays if it passes, else the
        best-scored candidate that passes takes its place on the path, and the ones that
        fail are the other side of the checks' pairs (`training.auto_labels`). Returns
        the action now chosen and the others."""
        candidates = [action, *sorted(alternates, key=lambda n: -(n.score or 0.0))]
        tried: dict[tuple[str, bool], bool] = {}
        for node in candidates:
            key = (node.text, node.truncated)
            if key not in tried:
                self.control.checkpoint()
                tried[key] = self.kernels.passes_checks(node.text, truncated=node.truncated)
        passes = [n for n in candidates if tried[(n.text, n.truncated)]]
        chosen = passes[0] if passes else action
        stored = []
        for node in candidates:
            status = NodeStatus.CHOSEN if node.id == chosen.id else NodeStatus.ALTERNATE
            verdict = {blocks.CHECKS_META: tried[(node.text, node.truncated)]}
            stored.append(self.recorder.update(node, status, meta=verdict))
        if chosen.id != action.id:
            self.state.path[-1] = stored[candidates.index(chosen)]
        return stored[candidates.index(chosen)], [n for n in stored if n.id != chosen.id]

    def _answered(self) -> bool:
        """Whether an action of this session has run: the files hold the model's answer."""
        return any(
            n.kind == blocks.ACTION and n.status is NodeStatus.EXECUTED for n in self.state.path
        )

    def _ask(
        self,
        action: Node,
        expectation: Node,
        alternates: Sequence[Node],
        tick: int,
        retry: str | None = None,
    ) -> Node | Regenerate | Rejected:
        """The gate's verdict, stored; the node to run, `Rejected`, or `Regenerate` when
        the operator wants new candidates."""
        policy = self.gate.policy
        why = (
            f"the approval policy is `{policy.value}`"
            if policy is not Policy.EVALUATED
            else f"score {action.score or 0.0:.2f} is under {self.gate.threshold:g}"
        )
        outcomes = (n for n in reversed(self.state.path) if n.kind == blocks.OUTCOME)
        request = ApprovalRequest(
            self.state.session_id,
            action,
            expectation,
            alternates,
            why,
            retry=retry,
            last_outcome=next(outcomes, None),
        )
        asking = self.gate.needs_operator(request) and self.gate.asker is not None
        if asking:
            self.recorder.set_status(SessionStatus.WAITING, "waiting for the operator")
            self.state.emit(
                ApprovalNeeded(session_id=self.state.session_id, node_id=action.id, why=why)
            )
        decision, actor = self.gate.decide(request, self.control.stopped)
        if asking:
            self.recorder.set_status(SessionStatus.RUNNING, None)
        return self._apply(decision, actor, action, alternates, tick)

    def _apply(
        self,
        decision: Answer,
        actor: Actor,
        action: Node,
        alternates: Sequence[Node],
        tick: int,
    ) -> Node | Regenerate | Rejected:
        verdict = decision.verdict
        if verdict is Verdict.REGENERATE:
            self.recorder.decision(action, verdict, actor, reason=decision.reason)
            self.recorder.update(action, NodeStatus.ALTERNATE)
            del self.state.path[-2:]  # the action and its expectation: both are sampled again
            return Regenerate()
        if verdict is Verdict.APPROVE:
            self.recorder.decision(action, verdict, actor)
            return self.recorder.update(action, NodeStatus.APPROVED)
        if verdict is Verdict.REJECT:
            reason = (decision.reason or "").strip() or "no reason given"
            self.recorder.decision(action, verdict, actor, reason=reason)
            self.recorder.update(action, NodeStatus.REJECTED)
            who = "The operator" if actor is Actor.OPERATOR else "The approval policy"
            self.recorder.runtime_block(
                blocks.OBSERVATION,
                f"{who} rejected the action above without running it.\nReason: {reason}",
                tick,
                title="Operator feedback",
            )
            return Rejected(reason)
        # An edit or a picked alternate replaces the action (and its expectation) on the
        # path; the model writes the expectation again for what will really run.
        del self.state.path[-2:]
        if verdict is Verdict.EDIT:
            replacement = self._operator_edit(action, decision.text or "")
            self.recorder.decision(action, verdict, actor, result=replacement)
            self.recorder.update(action, NodeStatus.EDITED)
        else:
            picked = [n for n in alternates if n.id == decision.alternate_id]
            if not picked:
                raise ValueError(f"node {decision.alternate_id} is not an alternate of this action")
            replacement = picked[0]
            self.recorder.decision(action, verdict, actor, result=replacement)
            self.recorder.update(action, NodeStatus.ALTERNATE)
        replacement = self.recorder.update(replacement, NodeStatus.APPROVED)
        self.state.path.append(replacement)
        self.sampler.generate(blocks.EXPECTATION, tick)
        return replacement

    def _operator_edit(self, action: Node, text: str) -> Node:
        """The operator's text as a new sibling of the model's action, scored like it."""
        prefix = prefix_before(self.state.path, action)
        question = blocks.QUESTIONS[blocks.ACTION]
        earlier = earlier_texts(self.state.path, blocks.ACTION, self.state.options.form)
        meta: dict[str, Any] = {}
        # The store keeps the whole edit (it is what runs); the context shows it capped.
        shown = text
        if len(text) > OPERATOR_CONTEXT_CHARS:
            meta[blocks.CONTEXT_CHARS_META] = OPERATOR_CONTEXT_CHARS
            shown = blocks.clip_body(text, OPERATOR_CONTEXT_CHARS)
        try:
            parents = (
                self.state.path[: self.state.path.index(action)]
                if action in self.state.path
                else self.state.path
            )
            collapsed = action.meta.get("collapsed", ())
            asked = self.state.prompter.question(
                prefix, shown, question, blocks.ACTION, parents, collapsed
            )
            log_odds = self.state.backend.score_yes_no([asked])
        except ContextOverflowError:  # too long to ask about: stored unscored, never lost
            log_odds = [0.0]
        form = self.state.options.form
        scored = ranking.score_candidates(blocks.ACTION, [text], log_odds, earlier, form)[0]
        title = forms.title(blocks.ACTION, form, text)
        if title:
            meta["title"] = title
        node = self.state.store.add_node(
            self.state.session_id,
            NewNode.rewrite_of(
                action,
                text,
                NodeStatus.EDITED,
                score=scored.score,
                score_parts=scored.parts,
                meta=meta,
            ),
        )
        self.recorder.emit_node(node)
        return node
