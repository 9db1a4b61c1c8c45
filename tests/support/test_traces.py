"""`build_session`: the size asked for, the runtime's tick shape, and the same tree for
the same seed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents import blocks as k
from storage import (
    Author,
    LabelScope,
    Node,
    NodeStatus,
    SessionStatus,
    TraceStore,
    Verdict,
)
from tests.support.traces import build_session

TICK_START = [k.TASK_REMINDER, k.OBSERVATION, k.OBSERVATION, k.ORIENTATION]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def _shape(nodes: list[Node]) -> list[tuple[object, ...]]:
    """Everything that should repeat for a seed, with ids made relative to the session."""
    first = nodes[0].id
    return [
        (
            n.id - first,
            None if n.parent_id is None else n.parent_id - first,
            None if n.edited_from_id is None else n.edited_from_id - first,
            n.tick,
            n.kind,
            n.text,
            n.status,
            n.author,
            n.score,
            n.meta.get("index"),
            n.meta.get("timestamp"),
        )
        for n in nodes
    ]


@pytest.mark.parametrize("blocks", [1, 12, 13, 2000])
def test_exactly_the_requested_number_of_blocks(store: TraceStore, blocks: int) -> None:
    session_id = build_session(store, blocks=blocks, title="Sized")
    assert store.count_nodes(session_id) == blocks
    session = store.get_session(session_id)
    assert session.title == "Sized"
    assert session.status is SessionStatus.COMPLETED


def test_ticks_follow_the_runtime_order_on_one_chain(store: TraceStore) -> None:
    session_id = build_session(store, blocks=2000, seed=7)
    nodes = store.tree(session_id)
    by_id = {n.id: n for n in nodes}
    genesis = nodes[0]
    assert (genesis.kind, genesis.tick, genesis.parent_id) == (k.GENESIS, 0, None)
    assert [n for n in nodes if n.parent_id is None] == [genesis]
    assert {n.kind for n in nodes} <= k.BLOCK_KINDS

    ticks: dict[int, list[Node]] = {}
    for n in nodes[1:]:
        ticks.setdefault(n.tick, []).append(n)
        assert by_id[n.parent_id or 0].tick in (n.tick, n.tick - 1)  # parents are real nodes
    assert list(ticks) == list(range(1, len(ticks) + 1))
    assert 140 < len(ticks) < 175  # about 12 blocks a tick
    for tick, members in list(ticks.items())[:-1]:  # the last tick may be cut short
        assert [n.kind for n in members[:5]] == [*TICK_START, k.ACTION], tick
        assert [n.kind for n in members[-3:]] == [k.OPTION, k.EVALUATION, k.OUTCOME], tick
        reminder = members[0]
        # each tick hangs under the previous one's outcome (tick 1 under the genesis)
        assert by_id[reminder.parent_id or 0].kind in (k.OUTCOME, k.GENESIS)
        # the proposed action and three alternates are siblings under the orientation
        orientation = members[3]
        actions = [n for n in members if n.parent_id == orientation.id and n.kind == k.ACTION]
        assert len(actions) >= 4
        assert sum(n.status is NodeStatus.ALTERNATE for n in actions) >= 3
        # the chain: from the outcome up to the tick's reminder, one block after another
        chain = [members[-1]]
        while chain[-1].id != reminder.id:
            chain.append(by_id[chain[-1].parent_id or 0])
        assert all(n.tick == tick for n in chain)
        assert all(n.status is not NodeStatus.ALTERNATE for n in chain)
        assert len(chain) >= 9  # reminder, 2 observations, orientation, action, ..., outcome


def test_detours_decisions_evaluations_and_labels(store: TraceStore) -> None:
    session_id = build_session(store, blocks=2000, seed=7)
    nodes = store.tree(session_id)
    by_id = {n.id: n for n in nodes}
    statuses = Counter(n.status for n in nodes if n.kind == k.ACTION)
    for status in (
        NodeStatus.EXECUTED,
        NodeStatus.ALTERNATE,
        NodeStatus.FAILED,
        NodeStatus.REJECTED,
        NodeStatus.EDITED,
    ):
        assert statuses[status] > 0, status
    assert statuses[NodeStatus.ALTERNATE] > statuses[NodeStatus.EXECUTED]

    failed = [n for n in nodes if n.status is NodeStatus.FAILED]
    for action in failed:
        (expectation,) = store.children(action.id)
        assert [c.kind for c in store.children(expectation.id)] == [k.ERROR]
        assert store.decisions(action.id)[0].verdict is Verdict.APPROVE

    rejected = [n for n in nodes if n.status is NodeStatus.REJECTED]
    (decision,) = store.decisions(rejected[0].id)
    assert decision.verdict is Verdict.REJECT and decision.reason

    edited = [n for n in nodes if n.status is NodeStatus.EDITED]
    (decision,) = store.decisions(edited[0].id)
    assert decision.verdict is Verdict.EDIT
    replacement = by_id[decision.result_node_id or 0]
    assert replacement.edited_from_id == edited[0].id
    assert replacement.parent_id == edited[0].parent_id
    assert replacement.author is Author.OPERATOR

    outcomes = [n for n in nodes if n.kind == k.OUTCOME]
    results = [r for n in outcomes for r in store.evaluations(n.id)]
    assert any(r.passed for r in results)
    assert any(r.passed is False for r in results)
    assert any(r.error for r in results)

    labels = store.session_labels(session_id)
    assert 2 <= len(labels) <= 10
    assert {label.scope for label in labels.values()} == {LabelScope.BLOCK, LabelScope.PATH}


def test_the_same_seed_gives_the_same_tree(store: TraceStore) -> None:
    first = store.tree(build_session(store, blocks=600, seed=3))
    again = store.tree(build_session(store, blocks=600, seed=3))
    other = store.tree(build_session(store, blocks=600, seed=4))
    assert _shape(first) == _shape(again)
    assert _shape(first) != _shape(other)


def test_no_blocks_is_refused(store: TraceStore) -> None:
    with pytest.raises(ValueError, match="at least one block"):
        build_session(store, blocks=0)
