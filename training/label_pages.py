"""The label queue: branches nobody has labelled yet, newest first, a page at a time, each
with what the operator needs to judge it (its decision, its tick's expectation and
evaluations) and the label the evidence suggests.

A branch is an `action` block of any status, alternates included. It is labelled when an
effective label covers it: its own, or a path label on it or on a descendant. A page costs
a fixed handful of queries whatever its size, so the label screen stays quick on a store of
tens of thousands of blocks.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storage import Decision, EvaluationKind, EvaluationResult, Label, Node, NodeStatus
from training.rules import Suggestion, suggest

if TYPE_CHECKING:
    from storage import Session
    from storage.views import QueuePages

ACTION = "action"
EXPECTATION = "expectation"
OUTCOME = "outcome"
PAGE_SIZE = 200

#: (session id, tick, node id): the queue's order, newest first
QueueKey = tuple[int, int, int]

#: Children that do not continue the chain: the candidates not taken, and originals the
#: operator rewrote (the edit, their sibling, continues instead).
_OFF_CHAIN = frozenset({NodeStatus.ALTERNATE, NodeStatus.EDITED})


@dataclass(frozen=True, slots=True)
class QueueItem:
    node: Node
    session_title: str
    #: the latest verdict on the block, if any
    decision: Decision | None
    #: the tick's expectation: the block's own, else (an alternate, a rewritten original)
    #: the one of the action that took its place
    expectation: Node | None
    #: the tick's evaluation callbacks, as the runtime recorded them on its outcome
    evaluations: tuple[EvaluationResult, ...]
    suggestion: Suggestion | None
    #: the block a path-scope label goes on: the tick's last block along this branch
    path_target_id: int
    #: the label the task's checks gave the block (`agent-console improve`), if any: the
    #: operator's label outranks it
    automatic: Label | None = None

    @property
    def key(self) -> QueueKey:
        return (self.node.session_id, self.node.tick, self.node.id)


@dataclass(frozen=True, slots=True)
class QueuePage:
    items: list[QueueItem]
    #: how many queue items there are from the page's first on (None: not counted)
    left: int | None
    #: whether the store holds more items past the page
    more: bool


def through(key: QueueKey) -> QueueKey:
    """The `after` key of a page that starts with `key` itself."""
    session_id, tick, node_id = key
    return (session_id, tick, node_id + 1)


def load_queue_page(
    store: QueuePages,
    *,
    after: QueueKey | None = None,
    limit: int = PAGE_SIZE,
    session_id: int | None = None,
    count: bool = True,
) -> QueuePage:
    """The next `limit` unlabelled branches past `after` (from the newest without it)."""
    nodes = store.label_queue(limit=limit + 1, after=after, session_id=session_id)
    more = len(nodes) > limit
    nodes = nodes[:limit]
    left = store.count_label_queue(after=after, session_id=session_id) if count else None
    return QueuePage(items=build_items(store, nodes), left=left, more=more)


def build_items(store: QueuePages, nodes: Sequence[Node]) -> list[QueueItem]:
    """The queue items for `nodes`, in their order, with a few queries in all."""
    if not nodes:
        return []
    sessions = store.sessions_by_id({n.session_id for n in nodes})
    decisions: dict[int, list[Decision]] = defaultdict(list)
    for decision in store.decisions_for(n.id for n in nodes):
        decisions[decision.node_id].append(decision)

    by_session: dict[int, list[Node]] = defaultdict(list)
    for node in nodes:
        by_session[node.session_id].append(node)
    children: dict[int, list[Node]] = defaultdict(list)
    for session_id, members in by_session.items():
        # Everything a walk needs descends from the items' parents, so has a larger id.
        oldest = min((n.parent_id or 0) for n in members)
        for block in store.tick_nodes(session_id, {n.tick for n in members}, after_id=oldest):
            if block.parent_id is not None:
                children[block.parent_id].append(block)

    walks = {node.id: _walk(node, children) for node in nodes}
    outcomes = {w.outcome.id for w in walks.values() if w.outcome is not None}
    evaluations: dict[int, list[EvaluationResult]] = defaultdict(list)
    for result in store.evaluations_for(outcomes):
        if result.kind is EvaluationKind.CALLBACK:
            evaluations[result.node_id].append(result)

    automatic = store.automatic_labels(n.id for n in nodes)
    items = []
    for node in nodes:
        walk = walks[node.id]
        tick_results = tuple(evaluations.get(walk.outcome.id, ())) if walk.outcome else ()
        own = decisions.get(node.id, [])
        suggestion = suggest(node, own, tick_results)
        checks = automatic.get(node.id)
        if suggestion is None and checks is not None:
            suggestion = Suggestion(checks.value, "the task's checks (an automatic label)")
        items.append(
            QueueItem(
                node=node,
                session_title=session_title(sessions.get(node.session_id)),
                decision=own[-1] if own else None,
                expectation=walk.expectation,
                evaluations=tick_results,
                suggestion=suggestion,
                path_target_id=walk.target_id,
                automatic=checks,
            )
        )
    return items


def session_title(session: Session | None) -> str:
    if session is None:
        return "(session gone)"
    task = session.task.strip()
    return session.title or (task.splitlines()[0][:80] if task else "(untitled)")


@dataclass(frozen=True, slots=True)
class _Walk:
    target_id: int
    expectation: Node | None
    outcome: Node | None


def tick_chain(start_id: int, tick: int, children: dict[int, list[Node]]) -> list[Node]:
    """The blocks after block `start_id` along the chain, to the end of `tick`. At each
    step the chain goes on through the latest child that is not an alternate or a
    rewritten original."""
    chain: list[Node] = []
    current = start_id
    while True:
        live = [
            c for c in children.get(current, ()) if c.tick == tick and c.status not in _OFF_CHAIN
        ]
        if not live:
            return chain
        step = max(live, key=lambda c: c.id)
        chain.append(step)
        current = step.id


def _walk(node: Node, children: dict[int, list[Node]]) -> _Walk:
    chain = tick_chain(node.id, node.tick, children)
    # An alternate (or a rewritten original) never reached the tick's end: its tick's
    # expectation and evaluations are those of the action that went on in its place.
    stand_in = chain
    if node.status in _OFF_CHAIN and node.parent_id is not None:
        stand_in = tick_chain(node.parent_id, node.tick, children)
    own_expectation = next(
        (c for c in chain[:1] if c.kind == EXPECTATION and c.parent_id == node.id), None
    )
    expectation = own_expectation or next((c for c in stand_in if c.kind == EXPECTATION), None)
    outcome = next((c for c in chain if c.kind == OUTCOME), None) or next(
        (c for c in stand_in if c.kind == OUTCOME), None
    )
    target = node.id if node.status is NodeStatus.ALTERNATE or not chain else chain[-1].id
    return _Walk(target_id=target, expectation=expectation, outcome=outcome)
