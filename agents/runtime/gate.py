"""A tick's action: sampled with its expectation, put to the approval gate, the decision
stored and applied (approve, reject with feedback, an operator's edit, a picked
alternate, sample again), then run; a failed run is followed by a debug block and another
try."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agents import blocks, forms, ranking
from agents.approval import Answer, ApprovalRequest, Policy
from agents.backends.base import ContextOverflowError
from agents.events import ApprovalNeeded
from agents.runtime.context import earlier_texts, prefix_before
from agents.runtime.kernel_host import KernelHost
from agents.runtime.sampling import Sampling
from agents.sandbox import CallResult
from storage import Actor, NewNode, Node, NodeStatus, SessionStatus, Verdict

#: An operator's edit longer than this shows in the context cut to it (the store keeps
#: it whole): a pasted megabyte must not end the session.
OPERATOR_CONTEXT_CHARS = 8000


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


class GateSteps(Sampling, KernelHost):
    def _act(self, state: TickState) -> None:
        attempts = 0
        #: why the last try did not do, for the next request to say
        missed: str | None = None
        while attempts < self.options.attempts:
            action, alternates = self._generate(blocks.ACTION, state.tick)
            expectation, _ = self._generate(blocks.EXPECTATION, state.tick)
            retry = f"try {attempts + 1} of {self.options.attempts}: {missed}" if missed else None
            chosen = self._ask(action, expectation, alternates, state.tick, retry)
            if isinstance(chosen, Regenerate):
                continue  # the operator's call: it costs no attempt
            if isinstance(chosen, Rejected):
                attempts += 1
                missed = f"action #{action.id} was rejected ({chosen.reason})"
                continue
            result = self._run_action(chosen)
            if result.ok:
                state.action = Attempt(self._update(chosen, NodeStatus.EXECUTED, result), result)
                return
            self._update(chosen, NodeStatus.FAILED, result)
            state.failed_attempts += 1
            attempts += 1
            error = forms.error_report(result.error or "the action failed")
            missed = f"action #{chosen.id} failed: {last_line(error)}"
            self._runtime_block(blocks.ERROR, error, state.tick)
            # A script's error is its own report: the model writes the next try after it.
            if attempts < self.options.attempts and self.options.form == forms.CALLBACK:
                self._generate(blocks.DEBUG, state.tick)

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
        outcomes = (n for n in reversed(self.path) if n.kind == blocks.OUTCOME)
        request = ApprovalRequest(
            self.session_id,
            action,
            expectation,
            alternates,
            why,
            retry=retry,
            last_outcome=next(outcomes, None),
        )
        asking = self.gate.needs_operator(request) and self.gate.asker is not None
        if asking:
            self._set_status(SessionStatus.WAITING, "waiting for the operator")
            self._emit(ApprovalNeeded(session_id=self.session_id, node_id=action.id, why=why))
        decision, actor = self.gate.decide(request, self._stop)
        if asking:
            self._set_status(SessionStatus.RUNNING, None)
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
            self._decision(action, verdict, actor, reason=decision.reason)
            self._update(action, NodeStatus.ALTERNATE)
            del self.path[-2:]  # the action and its expectation: both are sampled again
            return Regenerate()
        if verdict is Verdict.APPROVE:
            self._decision(action, verdict, actor)
            return self._update(action, NodeStatus.APPROVED)
        if verdict is Verdict.REJECT:
            reason = (decision.reason or "").strip() or "no reason given"
            self._decision(action, verdict, actor, reason=reason)
            self._update(action, NodeStatus.REJECTED)
            who = "The operator" if actor is Actor.OPERATOR else "The approval policy"
            self._runtime_block(
                blocks.OBSERVATION,
                f"{who} rejected the action above without running it.\nReason: {reason}",
                tick,
                title="Operator feedback",
            )
            return Rejected(reason)
        # An edit or a picked alternate replaces the action (and its expectation) on the
        # path; the model writes the expectation again for what will really run.
        del self.path[-2:]
        if verdict is Verdict.EDIT:
            replacement = self._operator_edit(action, decision.text or "")
            self._decision(action, verdict, actor, result=replacement)
            self._update(action, NodeStatus.EDITED)
        else:
            picked = [n for n in alternates if n.id == decision.alternate_id]
            if not picked:
                raise ValueError(f"node {decision.alternate_id} is not an alternate of this action")
            replacement = picked[0]
            self._decision(action, verdict, actor, result=replacement)
            self._update(action, NodeStatus.ALTERNATE)
        replacement = self._update(replacement, NodeStatus.APPROVED)
        self.path.append(replacement)
        self._generate(blocks.EXPECTATION, tick)
        return replacement

    def _operator_edit(self, action: Node, text: str) -> Node:
        """The operator's text as a new sibling of the model's action, scored like it."""
        prefix = prefix_before(self.path, action)
        question = blocks.QUESTIONS[blocks.ACTION]
        earlier = earlier_texts(self.path)
        meta: dict[str, Any] = {}
        # The store keeps the whole edit (it is what runs); the context shows it capped.
        shown = text
        if len(text) > OPERATOR_CONTEXT_CHARS:
            meta[blocks.CONTEXT_CHARS_META] = OPERATOR_CONTEXT_CHARS
            shown = blocks.clip_body(text, OPERATOR_CONTEXT_CHARS)
        try:
            parents = self.path[: self.path.index(action)] if action in self.path else self.path
            collapsed = action.meta.get("collapsed", ())
            asked = self.prompter.question(
                prefix, shown, question, blocks.ACTION, parents, collapsed
            )
            log_odds = self.backend.score_yes_no([asked])
        except ContextOverflowError:  # too long to ask about: stored unscored, never lost
            log_odds = [0.0]
        form = self.options.form
        scored = ranking.score_candidates(blocks.ACTION, [text], log_odds, earlier, form)[0]
        title = forms.title(blocks.ACTION, form, text)
        if title:
            meta["title"] = title
        node = self.store.add_node(
            self.session_id,
            NewNode.rewrite_of(
                action,
                text,
                NodeStatus.EDITED,
                score=scored.score,
                score_parts=scored.parts,
                meta=meta,
            ),
        )
        self._emit_node(node)
        return node
