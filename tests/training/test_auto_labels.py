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


@pytest.mark.worker
@pytest.mark.parametrize("judged", [False, True])
def test_a_rollout_judged_by_the_checks_runs_a_candidate_that_passes(
    tmp_path: Path, judged: bool
) -> None:
    """The model proposes two actions, the wrong one first (the ranking's choice). A
    rollout that tries each candidate against the task's checks on a copy of the work dir
    (`choose_by_checks`) runs the right one and is solved, and its labels make the pair
    right over wrong; without the trial the wrong one runs and nothing is paired."""
    from agents import forms
    from agents.backends.openai_backend import OpenAIBackend
    from agents.blocks import CHECKS_META
    from agents.runtime import Runtime, session_solved
    from agents.tasks.families import split, variant
    from storage import NodeStatus
    from tests.support.runs import options
    from tests.support.scripted_vllm import SERVED, scripted_vllm
    from tests.training.test_teach import WRONG

    taught = variant("compute", split("compute")[0][0])
    right, evaluation = taught.blocks_for(forms.SCRIPT)
    script = {
        "orientation": taught.orientation,
        "action": [WRONG, right],
        "expectation": "# value.txt holds the mean.",
        "evaluation": evaluation,
    }
    with scripted_vllm(script) as url, TraceStore(tmp_path / "traces.db") as store:
        backend = OpenAIBackend(url, SERVED, timeout=30)
        chosen_by = options(
            form=forms.SCRIPT, candidates=2, escalation=(), attempts=1, block_tokens=400,
            approval="auto", choose_by_checks=judged,
        )  # fmt: skip
        runtime = Runtime(
            store, backend, taught.task, chosen_by, sessions_dir=tmp_path / "sessions"
        )
        session = runtime.run().session_id
        backend.close()
        actions = [n for n in store.tree(session) if n.kind == "action"]
        ran = [n.text.strip() for n in actions if n.status is NodeStatus.EXECUTED]
        assert ran == [(right if judged else WRONG).strip()]
        assert session_solved(store, session) is judged
        result = label_from_checks(store, session)
        pairs = [(p.chosen_id, p.rejected_id) for p in load_evidence(store, session).dpo_pairs()]
        if not judged:
            assert all(CHECKS_META not in n.meta for n in actions)
            assert (result.good, result.bad, pairs) == (0, 1, [])
            return
        (wrong,) = [n for n in actions if n.text.strip() == WRONG.strip()]
        (chosen,) = [n for n in actions if n.status is NodeStatus.EXECUTED]
        assert (wrong.meta[CHECKS_META], chosen.meta[CHECKS_META]) == (False, True)
        assert wrong.status is NodeStatus.ALTERNATE
        assert (result.good, result.bad) == (1, 1)  # the path, and the candidate that failed
        assert (chosen.id, wrong.id) in pairs
