"""Labels from the task's checks (`training.auto_labels`): stored as automatic, never over
an operator's label, outranked by one given later, and the datasets read the operator's
word wherever both are on a branch (asserted block by block)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage import CHECKS_SOURCE, Actor, LabelScope, LabelValue, TraceStore
from tests.support.label_trees import SessionBuilder, Tick
from training.auto_labels import label_from_checks
from training.rules import load_evidence


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "t.db") as opened:
        yield opened


def rollout(store: TraceStore, *, solved: bool, ticks: int = 2) -> tuple[int, list[Tick]]:
    """A session as a batch rollout makes it: the policy approves every action (no
    operator), the last outcome says whether the task's checks passed."""
    builder = SessionBuilder(store, "rollout")
    done = [builder.executed(t, f"x = {t}", actor=Actor.POLICY) for t in range(1, ticks + 1)]
    passed = 1 if solved else 0
    store.update_node(done[-1].end.id, meta={"task_passed": passed, "task_total": 1})
    return builder.id, done


def test_a_solved_session_makes_its_path_good(store: TraceStore) -> None:
    session, ticks = rollout(store, solved=True)
    assert load_evidence(store, session).sft_examples() == []  # the policy's approvals: none
    result = label_from_checks(store, session)
    assert (result.solved, result.good, result.bad) == (True, 1, 0)
    label = store.label_of(ticks[-1].end.id)
    assert label is not None and label.source == CHECKS_SOURCE and label.automatic
    assert label.scope is LabelScope.PATH and label.value is LabelValue.GOOD
    examples = set(load_evidence(store, session).sft_examples())
    for tick in ticks:  # every block the model wrote on the path, no alternate
        assert {tick.orientation.id, tick.action.id, tick.exp.id} <= examples
        assert not {a.id for a in tick.alternates} & examples


def test_a_failed_session_makes_the_actions_it_ran_bad(store: TraceStore) -> None:
    session, ticks = rollout(store, solved=False)
    result = label_from_checks(store, session)
    assert (result.solved, result.good, result.bad) == (False, 0, 2)
    for tick in ticks:
        label = store.label_of(tick.action.id)
        assert label is not None and label.value is LabelValue.BAD and label.automatic
        assert all(store.label_of(a.id) is None for a in tick.alternates)  # never ran
    kto = dict(load_evidence(store, session).kto_examples())
    assert all(kto[t.action.id] is False for t in ticks)


def test_labelling_twice_writes_nothing_new(store: TraceStore) -> None:
    session, ticks = rollout(store, solved=False)
    label_from_checks(store, session)
    again = label_from_checks(store, session)
    assert (again.good, again.bad) == (0, 0)
    assert len(store.label_history(ticks[0].action.id)) == 1


def test_an_operators_label_is_never_overwritten(store: TraceStore) -> None:
    session, ticks = rollout(store, solved=False)
    store.add_label(ticks[0].action.id, LabelValue.GOOD)  # the operator saw it differently
    result = label_from_checks(store, session)
    assert (result.bad, result.kept) == (1, 1)
    assert [lab.source for lab in store.label_history(ticks[0].action.id)] == [None]
    evidence = load_evidence(store, session)
    assert ticks[0].action.id in evidence.sft_examples()  # the operator's good stands
    assert ticks[1].action.id not in evidence.sft_examples()


def test_an_operators_later_label_outranks_the_automatic_one(store: TraceStore) -> None:
    session, ticks = rollout(store, solved=False)
    label_from_checks(store, session)
    action = ticks[1].action.id
    operator = store.add_label(action, LabelValue.GOOD)
    assert store.label_of(action) == operator
    assert store.session_labels(session)[action] == operator
    assert action in load_evidence(store, session).sft_examples()
    # An automatic label given after it still does not outrank it ...
    store.add_label(action, LabelValue.BAD, source=CHECKS_SOURCE)
    assert store.label_of(action) == operator
    # ... and with the operator's retracted, the automatic one is the label again.
    store.retract_label(operator.id)
    fallback = store.label_of(action)
    assert fallback is not None and fallback.automatic and fallback.value is LabelValue.BAD


def test_on_a_solved_path_the_operators_bad_label_wins_block_by_block(
    store: TraceStore,
) -> None:
    session, ticks = rollout(store, solved=True)
    store.add_label(ticks[0].action.id, LabelValue.BAD)  # the operator: a lucky action
    label_from_checks(store, session)
    evidence = load_evidence(store, session)
    examples = set(evidence.sft_examples())
    assert ticks[0].action.id not in examples
    assert evidence.tainted(ticks[0].action.id)
    # before it, the checks' good label; after it, the operator's bad label taints the
    # rest of the branch, as it does without automatic labels
    assert ticks[0].orientation.id in examples
    assert not {ticks[1].orientation.id, ticks[1].action.id} & examples


def test_an_automatic_bad_label_above_does_not_taint_the_operators_good_block(
    store: TraceStore,
) -> None:
    session, ticks = rollout(store, solved=False)
    store.add_label(ticks[1].orientation.id, LabelValue.GOOD)  # below tick 1's action
    label_from_checks(store, session)
    evidence = load_evidence(store, session)
    assert not evidence.tainted(ticks[1].orientation.id)
    assert ticks[1].orientation.id in evidence.sft_examples()
    # while an operator's own bad label above still taints what follows it
    store.add_label(ticks[0].orientation.id, LabelValue.BAD)
    assert load_evidence(store, session).tainted(ticks[1].exp.id)
