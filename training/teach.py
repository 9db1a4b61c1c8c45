"""The scripted operator: teaching sessions on task-family variants, given as an operator
gives them in the console, through the same code paths.

In a session the operator answers the runtime's approval gate (`ScriptedOperator` is the
session's asker): it approves an action that is the variant's own fix, or that does the
task in other words (run on a copy of the work dir, the task's checks all pass after it:
`Runtime.passes_checks`), rejects a wrong one with a reason the first time when asked to,
and otherwise rewrites it to the fix. After the session it reviews the chosen blocks the
gate never asks about, as the label screen does: an orientation that names the task's
files and goal is labelled good, one that does not is rewritten (`rewrite`); an
evaluation that ran and agreed with the task's checks (passed the work they passed,
failed the work they failed) is labelled good, any other rewritten; a session the task's
checks passed gets a good path label on its outcome. Every one of those is an operator
action and is counted (`Tally`).

A reject costs the action a try: give teaching sessions at least two (`attempts`), or the
rewrite that follows a reject never comes.

What is taught comes from the variant's own blocks (`agents.tasks.families.Variant`), so a
teaching script never sees a held-out variant unless it is handed one, and
`teach_sessions` refuses those (`HeldOutError`).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agents import forms
from agents.approval import Answer, ApprovalRequest
from agents.blocks import ACTION
from agents.runtime import outcome_passed, own_check_name
from agents.tasks.families import Variant, split, variant
from storage import Author, EvaluationKind, LabelScope, LabelValue, NewNode, Node, NodeStatus

if TYPE_CHECKING:
    from agents.backends import Backend
    from agents.runtime import Outcome, RunOptions, Runtime
    from storage import TraceStore

#: the families a teaching set is drawn from (the fourth, text_edit, is never taught)
TAUGHT = ("fix_bug", "compute", "transform")


class HeldOutError(ValueError):
    """A teaching script was handed a held-out variant."""


@dataclass
class Tally:
    """The operator's actions, by kind."""

    approved: int = 0
    rejected: int = 0
    edited: int = 0
    rewritten: int = 0
    labelled: int = 0
    sessions: list[int] = field(default_factory=list)

    @property
    def actions(self) -> int:
        return self.approved + self.rejected + self.edited + self.rewritten + self.labelled

    @classmethod
    def read(cls, store: TraceStore, session_ids: Iterable[int]) -> Tally:
        """The operator's actions in stored teaching sessions: verdicts at the gate, blocks
        rewritten after the fact (operator-written, no verdict) and labels."""
        from storage import Verdict

        tally = cls()
        for session_id in session_ids:
            tally.sessions.append(session_id)
            tree = store.tree(session_id)
            verdicts = [d.verdict for d in store.decisions_for(n.id for n in tree)]
            tally.approved += verdicts.count(Verdict.APPROVE)
            tally.rejected += verdicts.count(Verdict.REJECT)
            tally.edited += verdicts.count(Verdict.EDIT)
            tally.rewritten += sum(
                n.author is Author.OPERATOR and n.kind in ("orientation", "evaluation")
                for n in tree
            )
            tally.labelled += len(store.session_labels(session_id))
        return tally

    def as_json(self) -> dict[str, int]:
        return {
            "sessions": len(self.sessions),
            "approved": self.approved,
            "rejected": self.rejected,
            "edited": self.edited,
            "rewritten": self.rewritten,
            "labelled": self.labelled,
            "actions": self.actions,
        }


def same_code(a: str, b: str) -> bool:
    """Whether two blocks are the same program (formatting and comments aside)."""
    try:
        return ast.dump(ast.parse(a)) == ast.dump(ast.parse(b))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return a.strip() == b.strip()


def same_action(a: str, b: str, form: str) -> bool:
    """Whether two action blocks of a session in `form` do the same: the same program, or
    (a file listing) the same files with the same code."""
    if form != forms.SCRIPT:
        return same_code(a, b)
    first, second = (forms.read_script(ACTION, text) for text in (a, b))
    if not first.files and not second.files:
        return same_code(first.text, second.text)
    return [p for p, _ in first.files] == [p for p, _ in second.files] and all(
        same_code(x, y) for (_, x), (_, y) in zip(first.files, second.files, strict=True)
    )


def names_the_task(text: str, variant: Variant) -> bool:
    """Whether an orientation names every file the variant is about (inputs and output)."""
    return all(name in text for name in variant.targets)


def rewrite(store: TraceStore, node: Node, text: str) -> Node:
    """The operator's text for a stored block, after the fact: a sibling written after the
    same prompt (an SFT example, and preferred to the original in a DPO pair); the original
    is marked rewritten, so a bad label on it does not throw away what followed it."""
    written = store.add_node(node.session_id, NewNode.rewrite_of(node, text, NodeStatus.APPROVED))
    store.set_node_status(node.id, NodeStatus.EDITED)
    return written


class ScriptedOperator:
    """The operator of one teaching session of `variant` (use it as the runtime's asker),
    writing its blocks in the session's `form` (`agents.forms`)."""

    def __init__(
        self,
        variant: Variant,
        tally: Tally,
        *,
        reject_first: bool = False,
        form: str = forms.CALLBACK,
    ) -> None:
        self.variant = variant
        self.tally = tally
        self.reject_first = reject_first
        self.form = form
        #: whether a proposed action (its text, and whether the token limit cut it) does
        #: the task (the runtime's `passes_checks`): right work in other words than the
        #: variant's is approved too
        self.does_the_task: Callable[..., bool] = lambda proposed, truncated=False: False

    @property
    def action(self) -> str:
        return self.variant.blocks_for(self.form)[0]

    @property
    def evaluation(self) -> str:
        return self.variant.blocks_for(self.form)[1]

    def __call__(self, request: ApprovalRequest) -> None:
        request.future.set_result(self.decide(request.action.text, request.action.truncated))

    def decide(self, proposed: str, truncated: bool = False) -> Answer:
        if same_action(proposed, self.action, self.form) or self.does_the_task(
            proposed, truncated=truncated
        ):
            self.tally.approved += 1
            return Answer.approve()
        if self.reject_first:
            self.reject_first = False
            self.tally.rejected += 1
            return Answer.reject(
                f"This does not do the task. {self.variant.task.prompt.split('. ')[-2]}."
            )
        self.tally.edited += 1
        return Answer.edit(self.action)

    def review(self, store: TraceStore, session_id: int, solved: bool) -> None:
        """Label or rewrite the blocks the gate did not ask about."""
        tree = store.tree(session_id)
        chosen = [n for n in tree if n.author is Author.MODEL]
        for node in chosen:
            if node.kind == "orientation" and node.status is NodeStatus.CHOSEN:
                if names_the_task(node.text, self.variant):
                    self._label(store, node, LabelValue.GOOD)
                else:
                    self._rewrite(store, node, self.variant.orientation)
            elif node.kind == "evaluation" and node.status in (
                NodeStatus.EXECUTED,
                NodeStatus.FAILED,
            ):
                if node.status is NodeStatus.EXECUTED and self._agrees(store, tree, node):
                    self._label(store, node, LabelValue.GOOD)
                else:
                    self._rewrite(store, node, self.evaluation)
        outcomes = [n for n in tree if n.kind == "outcome"]
        if solved and outcomes:
            store.add_label(outcomes[-1].id, LabelValue.GOOD, scope=LabelScope.PATH)
            self.tally.labelled += 1

    def _agrees(self, store: TraceStore, tree: list[Node], node: Node) -> bool:
        """Whether an evaluation the model wrote ran and said what the task's checks say
        of the same tick's work: a check that fails right work, or passes wrong work,
        is rewritten."""
        name = own_check_name(forms.title(node.kind, self.form, node.text) or "", self.variant.task)
        for outcome in (n for n in tree if n.kind == "outcome" and n.tick == node.tick):
            for result in store.evaluations(outcome.id):
                if result.kind is EvaluationKind.CALLBACK and result.name == name:
                    right = outcome_passed(outcome.meta)
                    return result.error is None and (result.passed is True) == right
        return False

    def _label(self, store: TraceStore, node: Node, value: LabelValue) -> None:
        store.add_label(node.id, value)
        self.tally.labelled += 1

    def _rewrite(self, store: TraceStore, node: Node, text: str) -> None:
        rewrite(store, node, text)
        self.tally.rewritten += 1


def check_teaching(variants: Iterable[Variant]) -> list[Variant]:
    """The variants, refused if any is held out (the split of `agents.tasks.families`)."""
    chosen = list(variants)
    for v in chosen:
        if v.seed in split(v.family)[1]:
            raise HeldOutError(f"{v.family}:{v.seed} is a held-out variant: it is never taught")
    return chosen


def teach_sessions(
    variants: Iterable[Variant],
    make_runtime: Callable[[Variant, ScriptedOperator], Runtime],
    solved: Callable[[Outcome], bool],
    *,
    reject_every: int = 4,
    offset: int = 0,
) -> Tally:
    """Run one teaching session per variant (never a held-out one): `make_runtime` builds
    the session's runtime with the operator as its asker; `solved` reads its outcome. The
    operator writes its blocks in the session's form (`RunOptions.form`), and rejects
    the first action of every `reject_every`-th session (counted from `offset`: where a
    run that teaches a session at a time has got to)."""
    tally = Tally()
    for i, v in enumerate(check_teaching(variants)):
        operator = ScriptedOperator(
            v, tally, reject_first=reject_every > 0 and (offset + i) % reject_every == 0
        )
        runtime = make_runtime(v, operator)
        operator.form = runtime.options.form
        operator.does_the_task = runtime.passes_checks
        outcome = runtime.run()
        tally.sessions.append(outcome.session_id)
        operator.review(runtime.store, outcome.session_id, solved(outcome))
    return tally


def teaching_order(families: Iterable[str], count: int) -> list[Variant]:
    """The first `count` teaching variants, families in turn (never a held-out one)."""
    names = list(families)
    seeds = {family: split(family)[0] for family in names}
    order = [variant(f, seeds[f][i]) for i in range(len(seeds[names[0]])) for f in names]
    return order[:count]


def variant_options(
    backend: Backend,
    *,
    seed: int,
    teaching: bool,
    attempts: int = 1,
    candidates: int | None = None,
    block_tokens: int | None = None,
) -> RunOptions:
    """One tick of a family variant, as the learning bench and the starter sessions run it:
    `teaching` asks the operator (and gives the action a second try, for the rewrite
    after a reject); otherwise approval is automatic. Candidates and block tokens left
    None are the model's defaults (`auto_defaults`)."""
    from agents.runtime import UNATTENDED, session_options
    from agents.settings import Settings

    return session_options(
        Settings(),
        backend,
        **{**UNATTENDED, **({"approval": "ask"} if teaching else {})},
        max_ticks=1,
        attempts=max(2, attempts) if teaching else attempts,
        candidates=candidates,
        escalation=(),
        block_tokens=block_tokens,
        seed=seed,
    )
