"""Small hand-built sessions shaped the way the runtime shapes them (`_act` and `_apply` in
agents/runtime/gate.py, `_outcome` in agents/runtime/tick.py), for the labelling and
training-rule tests.

Each helper writes one tick through the store's public calls and returns its blocks by
role, so a test can name "the rejected action of tick 2" instead of an id. The shapes:

- `executed`: orientation, the chosen action (executed) with alternates as siblings,
  its expectation, evaluation, outcome (with the evaluation callbacks' results).
- `rejected`: the operator rejects the first action (it stays on the chain with its
  expectation, then the runtime's "Operator feedback" observation), a second action runs.
- `edited`: the operator rewrites the action: the original (status edited) keeps a dead
  expectation; the edit, its sibling, runs.
- `picked`: the operator runs an alternate instead: the replaced action becomes an
  alternate with a dead expectation; the picked one runs.
- `failed`: the action raises: error, debug, and a second action that runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from storage import (
    Actor,
    Author,
    EvaluationKind,
    NewNode,
    Node,
    NodeStatus,
    TraceStore,
    Verdict,
)

#: A callback's result: True/False passed or not; a string is the error it raised.
Callbacks = Mapping[str, bool | str]

RUNTIME_KINDS = {"genesis", "task-reminder", "observation", "error", "option", "outcome"}


@dataclass
class Tick:
    tick: int
    orientation: Node
    #: the action that ran (or, for an unfinished tick, the chosen one)
    action: Node
    alternates: list[Node] = field(default_factory=list)
    expectation: Node | None = None
    outcome: Node | None = None
    #: the blocks of a detour: "rejected", "edited" (the original), "replaced", "failed",
    #: and their expectations ("rejected_expectation", ...), "feedback", "error", "debug"
    more: dict[str, Node] = field(default_factory=dict)

    @property
    def end(self) -> Node:
        """The tick's outcome (its last block); only an unfinished tick has none."""
        assert self.outcome is not None, f"tick {self.tick} is unfinished"
        return self.outcome

    @property
    def exp(self) -> Node:
        assert self.expectation is not None
        return self.expectation


class SessionBuilder:
    """One session, written tick by tick; `last` is the end of the chain."""

    def __init__(self, store: TraceStore, title: str, task: str = "Solve the puzzle") -> None:
        self.store = store
        self.session = store.create_session(task, title=title)
        self.id = self.session.id
        self.last = store.add_node(
            self.id,
            NewNode(
                kind="genesis",
                text='"""the task and the block API"""',
                author=Author.RUNTIME,
                status=NodeStatus.CHOSEN,
            ),
        )

    def block(
        self,
        kind: str,
        text: str,
        *,
        tick: int,
        parent: Node | None = None,
        status: NodeStatus = NodeStatus.CHOSEN,
        author: Author | None = None,
        advance: bool = True,
        **fields: object,
    ) -> Node:
        """Add a block under `parent` (default: the end of the chain); with `advance` it
        becomes the new end."""
        under = parent if parent is not None else self.last
        node = self.store.add_node(
            self.id,
            NewNode(
                kind=kind,
                text=text,
                tick=tick,
                parent_id=under.id,
                status=status,
                author=author or (Author.RUNTIME if kind in RUNTIME_KINDS else Author.MODEL),
                **fields,  # type: ignore[arg-type]
            ),
        )
        if advance:
            self.last = node
        return node

    def candidates(
        self, tick: int, chosen: str, alternates: list[str], *, score: float = 1.0
    ) -> tuple[Node, list[Node]]:
        """Sibling action candidates under the end of the chain; the chosen one joins it."""
        parent = self.last
        stored = self.store.add_nodes(
            self.id,
            [
                NewNode(
                    kind="action",
                    text=text,
                    tick=tick,
                    parent_id=parent.id,
                    status=NodeStatus.CHOSEN if i == 0 else NodeStatus.ALTERNATE,
                    score=score - i * 0.5,
                    meta={"title": f"action {tick}.{i}"},
                )
                for i, text in enumerate([chosen, *alternates])
            ],
        )
        self.last = stored[0]
        return stored[0], stored[1:]

    def start(self, tick: int) -> Node:
        self.block("task-reminder", "Task: solve the puzzle", tick=tick)
        return self.block("orientation", f"# tick {tick}: what next?", tick=tick)

    def set_status(self, node: Node, status: NodeStatus, **meta: object) -> Node:
        updated = self.store.update_node(node.id, status=status, meta=dict(meta) or None)
        if self.last.id == node.id:
            self.last = updated
        return updated

    def finish(self, tick: int, callbacks: Callbacks) -> Node:
        """Evaluation and outcome blocks; each callback's result goes on the outcome."""
        self.block(
            "evaluation",
            "self.add_evaluation('check', check)",
            tick=tick,
            status=NodeStatus.EXECUTED,
        )
        outcome = self.block("outcome", "| check | ok |", tick=tick, score=0.5)
        for name, result in callbacks.items():
            if isinstance(result, str):
                self.store.record_evaluation(
                    outcome.id, name, kind=EvaluationKind.CALLBACK, passed=False, error=result
                )
            else:
                self.store.record_evaluation(
                    outcome.id, name, kind=EvaluationKind.CALLBACK, result=result, passed=result
                )
        self.store.record_evaluation(
            outcome.id, "Did the tick go well?", kind=EvaluationKind.LOGIT, result=0.4, passed=True
        )
        return outcome

    def run(
        self, tick: int, action: Node, expectation: str, callbacks: Callbacks
    ) -> tuple[Node, Node]:
        """The action's expectation, the action executed, and the tick's end."""
        exp = self.block("expectation", expectation, tick=tick)
        self.set_status(action, NodeStatus.EXECUTED)
        return exp, self.finish(tick, callbacks)

    # -- whole ticks, one per shape ---------------------------------------------------------

    def executed(
        self,
        tick: int,
        text: str = "x = 1",
        *,
        alternates: int = 1,
        callbacks: Callbacks | None = None,
        approve: bool = True,
        actor: Actor = Actor.OPERATOR,
    ) -> Tick:
        orientation = self.start(tick)
        action, alts = self.candidates(
            tick, text, [f"alt_{tick}_{i} = {i}" for i in range(alternates)]
        )
        if approve:
            self.store.record_decision(action.id, Verdict.APPROVE, actor=actor)
        exp, outcome = self.run(
            tick, action, f"x is set ({tick})", {"check": True} if callbacks is None else callbacks
        )
        action = self.store.get_node(action.id)
        return Tick(tick, orientation, action, alts, exp, outcome)

    def rejected(
        self, tick: int, reason: str = "wrong file", *, callbacks: Callbacks | None = None
    ) -> Tick:
        orientation = self.start(tick)
        first, alts = self.candidates(tick, "rm -rf data", ["open('x').read()"])
        self.store.record_decision(first.id, Verdict.REJECT, actor=Actor.OPERATOR, reason=reason)
        first = self.set_status(first, NodeStatus.REJECTED)
        first_exp = self.block("expectation", "data is gone", tick=tick)
        feedback = self.block(
            "observation",
            f"The operator rejected the action above without running it.\nReason: {reason}",
            tick=tick,
            meta={"title": "Operator feedback"},
        )
        second, _ = self.candidates(tick, "print(open('data').read())", [])
        self.store.record_decision(second.id, Verdict.APPROVE, actor=Actor.OPERATOR)
        exp, outcome = self.run(
            tick, second, "the data is printed", {"check": True} if callbacks is None else callbacks
        )
        return Tick(
            tick,
            orientation,
            self.store.get_node(second.id),
            [],
            exp,
            outcome,
            {
                "rejected": first,
                "rejected_alternate": alts[0],
                "rejected_expectation": first_exp,
                "feedback": feedback,
            },
        )

    def edited(self, tick: int, *, callbacks: Callbacks | None = None) -> Tick:
        orientation = self.start(tick)
        original, alts = self.candidates(tick, "x = 10", ["x = 11"])
        dead = self.block("expectation", "x is 10", tick=tick, advance=False, parent=original)
        edit = self.block(
            "action",
            "x = 100",
            tick=tick,
            parent=orientation,
            author=Author.OPERATOR,
            status=NodeStatus.EDITED,
            edited_from_id=original.id,
        )
        self.store.record_decision(
            original.id, Verdict.EDIT, actor=Actor.OPERATOR, result_node_id=edit.id
        )
        original = self.set_status(original, NodeStatus.EDITED)
        edit = self.set_status(edit, NodeStatus.APPROVED)
        exp, outcome = self.run(
            tick, edit, "x is 100", {"check": True} if callbacks is None else callbacks
        )
        return Tick(
            tick,
            orientation,
            self.store.get_node(edit.id),
            alts,
            exp,
            outcome,
            {"edited": original, "edited_expectation": dead},
        )

    def picked(self, tick: int, *, callbacks: Callbacks | None = None) -> Tick:
        orientation = self.start(tick)
        replaced, alts = self.candidates(tick, "y = 1", ["y = 2", "y = 3"])
        dead = self.block("expectation", "y is 1", tick=tick, advance=False, parent=replaced)
        picked = alts[0]
        self.store.record_decision(
            replaced.id, Verdict.PICK_ALTERNATE, actor=Actor.OPERATOR, result_node_id=picked.id
        )
        replaced = self.set_status(replaced, NodeStatus.ALTERNATE)
        self.last = self.set_status(picked, NodeStatus.APPROVED)
        exp, outcome = self.run(
            tick, self.last, "y is 2", {"check": True} if callbacks is None else callbacks
        )
        return Tick(
            tick,
            orientation,
            self.store.get_node(picked.id),
            [alts[1]],
            exp,
            outcome,
            {"replaced": replaced, "replaced_expectation": dead},
        )

    def failed(self, tick: int, *, callbacks: Callbacks | None = None) -> Tick:
        orientation = self.start(tick)
        first, _ = self.candidates(tick, "1 / 0", [])
        self.store.record_decision(first.id, Verdict.APPROVE, actor=Actor.OPERATOR)
        first_exp = self.block("expectation", "a number", tick=tick)
        first = self.set_status(
            first,
            NodeStatus.FAILED,
            error="Traceback (most recent call last):\nZeroDivisionError: division by zero",
        )
        error = self.block("error", "ZeroDivisionError: division by zero", tick=tick)
        debug = self.block("debug", "# dividing by zero; use 1 / 2", tick=tick)
        second, _ = self.candidates(tick, "1 / 2", [])
        self.store.record_decision(second.id, Verdict.APPROVE, actor=Actor.OPERATOR)
        exp, outcome = self.run(
            tick, second, "a half", {"check": True} if callbacks is None else callbacks
        )
        return Tick(
            tick,
            orientation,
            self.store.get_node(second.id),
            [],
            exp,
            outcome,
            {"failed": first, "failed_expectation": first_exp, "error": error, "debug": debug},
        )

    def unfinished(self, tick: int, text: str = "z = 0") -> Tick:
        """A tick cut short while the operator was being asked: the action is chosen."""
        orientation = self.start(tick)
        action, alts = self.candidates(tick, text, ["z = 1"])
        exp = self.block("expectation", "z is 0", tick=tick)
        return Tick(tick, orientation, action, alts, exp, None)
