"""The training-data rules (SFT examples, DPO pairs, counts) and the label queue, over
real stores holding sessions shaped the way the runtime shapes them."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import event

from storage import (
    Actor,
    Author,
    EvaluationKind,
    LabelScope,
    LabelValue,
    NewNode,
    NodeStatus,
    TraceStore,
    Verdict,
)
from tests.support.label_trees import SessionBuilder
from training.label_pages import load_queue_page, through
from training.rules import (
    Counts,
    Pair,
    PairRule,
    Suggestion,
    TrainingTally,
    count_training_data,
    dpo_pairs,
    iter_session_counts,
    load_evidence,
    sft_examples,
    suggest,
)


def examples(store: TraceStore, session_id: int, since: float | None = None) -> list[int]:
    return sft_examples(
        store.tree(session_id),
        store.session_labels(session_id),
        store.session_decisions(session_id),
        since=since,
    )


def pairs(store: TraceStore, session_id: int, since: float | None = None) -> list[Pair]:
    return dpo_pairs(
        store.tree(session_id),
        store.session_labels(session_id),
        store.session_decisions(session_id),
        since=since,
    )


# -- SFT examples -----------------------------------------------------------------------------


def test_nothing_said_means_no_training_data(store: TraceStore) -> None:
    s = SessionBuilder(store, "quiet")
    s.executed(1, approve=False)
    assert examples(store, s.id) == []
    assert pairs(store, s.id) == []
    assert count_training_data(store) == Counts(0, 0)


def test_an_operator_approval_makes_an_example_a_policy_approval_does_not(
    store: TraceStore,
) -> None:
    s = SessionBuilder(store, "approvals")
    by_operator = s.executed(1)
    by_policy = s.executed(2, actor=Actor.POLICY)
    assert examples(store, s.id) == [by_operator.action.id]
    assert by_policy.action.status is NodeStatus.EXECUTED


def test_a_status_approved_block_without_a_policy_verdict_is_an_example(
    store: TraceStore,
) -> None:
    s = SessionBuilder(store, "statuses")
    s.start(1)
    action = s.block("action", "x = 1", tick=1, status=NodeStatus.APPROVED)
    assert examples(store, s.id) == [action.id]
    store.record_decision(action.id, Verdict.APPROVE, actor=Actor.POLICY)
    assert examples(store, s.id) == []


def test_a_good_block_label_makes_an_example_of_that_block_only(store: TraceStore) -> None:
    s = SessionBuilder(store, "block label")
    t = s.executed(1, approve=False, alternates=2)
    store.add_label(t.alternates[1].id, LabelValue.GOOD)
    assert examples(store, s.id) == [t.alternates[1].id]


def test_a_good_path_label_covers_the_model_and_operator_blocks_up_to_the_root(
    store: TraceStore,
) -> None:
    s = SessionBuilder(store, "path label")
    one = s.executed(1, approve=False)
    two = s.edited(2)
    three = s.executed(3, approve=False)
    store.add_label(two.end.id, LabelValue.GOOD, scope=LabelScope.PATH)

    got = set(examples(store, s.id))
    expected = {n.id for n in store.path(two.end.id) if n.author is not Author.RUNTIME}
    assert got == expected
    assert one.orientation.id in got and one.action.id in got and one.exp.id in got
    assert two.action.id in got  # the operator's edit, on the path
    # not on the path: alternates, the rewritten original, the ticks after the label
    assert one.alternates[0].id not in got
    assert two.more["edited"].id not in got
    assert three.action.id not in got
    assert all(store.get_node(i).author is not Author.RUNTIME for i in got)


def test_a_path_label_does_not_make_examples_of_blocks_already_judged_wrong(
    store: TraceStore,
) -> None:
    """A rejected or failed action stays on the chain; a good path label over it says the
    path went well, not that the operator was wrong to reject it."""
    s = SessionBuilder(store, "judged")
    rejected = s.rejected(1)
    failed = s.failed(2)
    store.add_label(failed.end.id, LabelValue.GOOD, scope=LabelScope.PATH)
    got = examples(store, s.id)
    assert rejected.more["rejected"].id not in got
    assert failed.more["failed"].id not in got
    assert failed.more["debug"].id in got
    assert rejected.action.id in got and failed.action.id in got
    # its own good label does make one of it
    store.add_label(rejected.more["rejected"].id, LabelValue.GOOD)
    assert rejected.more["rejected"].id in examples(store, s.id)


def test_operator_edits_are_examples_and_runtime_blocks_never_are(store: TraceStore) -> None:
    s = SessionBuilder(store, "edit")
    t = s.edited(1)
    assert examples(store, s.id) == [t.action.id]
    store.add_label(t.end.id, LabelValue.GOOD)
    store.add_label(t.more["edited"].id, LabelValue.GOOD)
    got = examples(store, s.id)
    assert t.end.id not in got
    assert t.more["edited"].id in got  # an explicit good label on the original counts


def test_a_bad_label_excludes_the_block_and_everything_under_it(store: TraceStore) -> None:
    s = SessionBuilder(store, "bad")
    one = s.executed(1)
    two = s.executed(2)
    assert examples(store, s.id) == [one.action.id, two.action.id]
    store.add_label(one.exp.id, LabelValue.BAD)
    # the action above the bad block stays; the tick-2 action lies under it
    assert examples(store, s.id) == [one.action.id]
    store.add_label(one.action.id, LabelValue.BAD)
    assert examples(store, s.id) == []


def test_a_bad_label_on_a_rejected_or_failed_action_keeps_the_recovery_after_it(
    store: TraceStore,
) -> None:
    s = SessionBuilder(store, "recovery")
    one = s.rejected(1)
    two = s.failed(2)
    three = s.executed(3)
    store.add_label(one.more["rejected"].id, LabelValue.BAD)
    store.add_label(two.more["failed"].id, LabelValue.BAD)
    got = examples(store, s.id)
    assert one.more["rejected"].id not in got and two.more["failed"].id not in got
    # the actions that ran after the operator's feedback and after the error still count
    assert {one.action.id, two.action.id, three.action.id} <= set(got)
    # a bad label on a block that was not judged wrong still covers what follows it
    store.add_label(two.action.id, LabelValue.BAD)
    assert three.action.id not in examples(store, s.id)


def test_a_bad_path_label_covers_the_ancestors_but_not_the_siblings(store: TraceStore) -> None:
    s = SessionBuilder(store, "bad path")
    t = s.executed(1, approve=False, alternates=2)
    store.add_label(t.alternates[0].id, LabelValue.GOOD)
    store.add_label(t.action.id, LabelValue.GOOD)
    store.add_label(t.orientation.id, LabelValue.GOOD)
    store.add_label(t.exp.id, LabelValue.BAD, scope=LabelScope.PATH)
    assert examples(store, s.id) == [t.alternates[0].id]


def test_the_latest_label_wins_and_retracted_labels_do_not_count(store: TraceStore) -> None:
    s = SessionBuilder(store, "history")
    t = s.executed(1)
    good = store.add_label(t.alternates[0].id, LabelValue.GOOD)
    assert examples(store, s.id) == [t.action.id, t.alternates[0].id]
    store.retract_label(good.id)
    assert examples(store, s.id) == [t.action.id]

    bad = store.add_label(t.action.id, LabelValue.BAD, note="no")
    assert examples(store, s.id) == []
    store.add_label(t.action.id, LabelValue.GOOD)
    assert examples(store, s.id) == [t.action.id]
    newest = store.add_label(t.action.id, LabelValue.BAD, scope=LabelScope.PATH)
    assert examples(store, s.id) == []
    store.retract_label(newest.id)
    assert examples(store, s.id) == [t.action.id]
    assert store.label_of(t.action.id) == store.label_history(t.action.id)[-2]
    assert bad.retracted_at is None


def test_a_retracted_path_label_no_longer_covers_the_path(store: TraceStore) -> None:
    s = SessionBuilder(store, "retracted path")
    t = s.executed(1, approve=False)
    label = store.add_label(t.end.id, LabelValue.BAD, scope=LabelScope.PATH)
    store.add_label(t.orientation.id, LabelValue.GOOD)
    assert examples(store, s.id) == []
    store.retract_label(label.id)
    assert examples(store, s.id) == [t.orientation.id]


# -- DPO pairs --------------------------------------------------------------------------------


def test_good_over_bad_labelled_siblings(store: TraceStore) -> None:
    s = SessionBuilder(store, "labels")
    t = s.executed(1, approve=False, alternates=2)
    store.add_label(t.alternates[0].id, LabelValue.GOOD)
    store.add_label(t.alternates[1].id, LabelValue.BAD)
    store.add_label(t.action.id, LabelValue.BAD)
    assert pairs(store, s.id) == [
        Pair(t.alternates[0].id, t.action.id, PairRule.LABELS),
        Pair(t.alternates[0].id, t.alternates[1].id, PairRule.LABELS),
    ]


def test_labels_on_blocks_that_are_not_siblings_make_no_pair(store: TraceStore) -> None:
    s = SessionBuilder(store, "cousins")
    one = s.executed(1, approve=False)
    two = s.executed(2, approve=False)
    store.add_label(one.action.id, LabelValue.GOOD)
    store.add_label(two.alternates[0].id, LabelValue.BAD)
    store.add_label(one.exp.id, LabelValue.BAD)
    assert pairs(store, s.id) == []


def test_a_path_label_makes_the_branch_it_covers_a_side_of_a_pair(store: TraceStore) -> None:
    s = SessionBuilder(store, "path pair")
    t = s.executed(1, approve=False)
    store.add_label(t.end.id, LabelValue.GOOD, scope=LabelScope.PATH)
    store.add_label(t.alternates[0].id, LabelValue.BAD)
    assert pairs(store, s.id) == [Pair(t.action.id, t.alternates[0].id, PairRule.LABELS)]


def test_approved_over_rejected_siblings(store: TraceStore) -> None:
    s = SessionBuilder(store, "approval")
    orientation = s.start(1)
    first, (second,) = s.candidates(1, "a = 1", ["a = 2"])
    store.record_decision(first.id, Verdict.REJECT, reason="no", actor=Actor.OPERATOR)
    store.record_decision(second.id, Verdict.APPROVE, actor=Actor.OPERATOR)
    assert pairs(store, s.id) == [Pair(second.id, first.id, PairRule.APPROVAL)]
    assert orientation.id not in examples(store, s.id)


def test_a_policy_rejection_is_no_preference(store: TraceStore) -> None:
    s = SessionBuilder(store, "deny")
    s.start(1)
    first, (second,) = s.candidates(1, "a = 1", ["a = 2"])
    store.record_decision(first.id, Verdict.REJECT, reason="dry run", actor=Actor.POLICY)
    store.update_node(first.id, status=NodeStatus.REJECTED)
    store.record_decision(second.id, Verdict.APPROVE, actor=Actor.OPERATOR)
    assert pairs(store, s.id) == []


def test_the_operators_edit_over_the_models_original(store: TraceStore) -> None:
    s = SessionBuilder(store, "edit")
    t = s.edited(1)
    assert pairs(store, s.id) == [Pair(t.action.id, t.more["edited"].id, PairRule.EDIT)]


def test_a_picked_alternate_over_the_one_it_replaced(store: TraceStore) -> None:
    s = SessionBuilder(store, "pick")
    t = s.picked(1)
    assert pairs(store, s.id) == [Pair(t.action.id, t.more["replaced"].id, PairRule.PICK)]
    assert examples(store, s.id) == [t.action.id]


def test_pairs_are_deduplicated_keeping_the_first_rule(store: TraceStore) -> None:
    s = SessionBuilder(store, "dedupe")
    t = s.edited(1)
    store.add_label(t.action.id, LabelValue.GOOD)
    store.add_label(t.more["edited"].id, LabelValue.BAD)
    assert pairs(store, s.id) == [Pair(t.action.id, t.more["edited"].id, PairRule.LABELS)]


def test_no_pair_prefers_a_block_covered_by_a_bad_label(store: TraceStore) -> None:
    s = SessionBuilder(store, "bad edit")
    edit = s.edited(1)
    assert pairs(store, s.id) != []
    store.add_label(edit.action.id, LabelValue.BAD)
    assert pairs(store, s.id) == []
    p = SessionBuilder(store, "bad pick")
    pick = p.picked(1)
    assert pairs(store, p.id) != []
    store.add_label(pick.end.id, LabelValue.BAD, scope=LabelScope.PATH)
    assert pairs(store, p.id) == []


def test_a_bad_label_on_the_preferred_side_turns_the_preference(store: TraceStore) -> None:
    s = SessionBuilder(store, "turned")
    s.start(1)
    first, (second,) = s.candidates(1, "a = 1", ["a = 2"])
    store.record_decision(first.id, Verdict.APPROVE, actor=Actor.OPERATOR)
    store.record_decision(second.id, Verdict.REJECT, reason="no", actor=Actor.OPERATOR)
    assert pairs(store, s.id) == [Pair(first.id, second.id, PairRule.APPROVAL)]
    store.add_label(second.id, LabelValue.GOOD)
    store.add_label(first.id, LabelValue.BAD)
    assert pairs(store, s.id) == [Pair(second.id, first.id, PairRule.LABELS)]


def test_contradicting_pairs_cancel_out(store: TraceStore) -> None:
    """Approved A over rejected B, but B picked in A's place: no pair either way."""
    s = SessionBuilder(store, "contradiction")
    s.start(1)
    first, (second,) = s.candidates(1, "a = 1", ["a = 2"])
    store.record_decision(first.id, Verdict.APPROVE, actor=Actor.OPERATOR)
    store.record_decision(second.id, Verdict.REJECT, reason="no", actor=Actor.OPERATOR)
    store.record_decision(
        first.id, Verdict.PICK_ALTERNATE, actor=Actor.OPERATOR, result_node_id=second.id
    )
    assert pairs(store, s.id) == []


# -- counting ---------------------------------------------------------------------------------


def test_counts_add_up_over_sessions_one_at_a_time(store: TraceStore) -> None:
    a = SessionBuilder(store, "a")
    a.edited(1)
    a.picked(2)
    b = SessionBuilder(store, "b")
    t = b.executed(1, approve=False)
    store.add_label(t.alternates[0].id, LabelValue.BAD)
    store.add_label(t.action.id, LabelValue.GOOD)
    empty = store.create_session("nothing yet")

    per_session = dict(iter_session_counts(store))
    assert per_session == {a.id: Counts(2, 2), b.id: Counts(1, 1), empty.id: Counts(0, 0)}
    assert count_training_data(store) == Counts(3, 3)


def test_since_counts_only_what_was_said_from_then_on(store: TraceStore) -> None:
    old = SessionBuilder(store, "old")
    t = old.executed(1)
    untouched = SessionBuilder(store, "untouched")
    untouched.edited(1)
    time.sleep(0.01)
    since = time.time()
    assert count_training_data(store, since=since) == Counts(0, 0)
    store.add_label(t.alternates[0].id, LabelValue.GOOD)
    store.add_label(t.exp.id, LabelValue.BAD)
    # the new good label makes an example; the approval's is older than `since`
    assert count_training_data(store, since=since) == Counts(1, 0)
    assert set(examples(store, old.id)) == {t.action.id, t.alternates[0].id}
    assert examples(store, old.id, since=since) == [t.alternates[0].id]
    assert [sid for sid, _ in iter_session_counts(store, since=since)] == [old.id]


def test_since_still_applies_bad_labels_given_earlier(store: TraceStore) -> None:
    s = SessionBuilder(store, "early bad")
    t = s.executed(1, approve=False)
    store.add_label(t.orientation.id, LabelValue.BAD)
    time.sleep(0.01)
    since = time.time()
    store.add_label(t.action.id, LabelValue.GOOD)
    assert examples(store, s.id, since=since) == []


def test_counting_reads_a_session_in_three_queries(store: TraceStore) -> None:
    s = SessionBuilder(store, "queries")
    for tick in range(1, 6):
        s.rejected(tick)
        store.add_label(s.last.id, LabelValue.GOOD, scope=LabelScope.PATH)
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if statement.split(None, 1)[0].upper() == "SELECT":
            seen.append(statement)

    engine = store.db.reader  # the only way to watch the queries; the API hides engines
    event.listen(engine, "before_cursor_execute", record)
    try:
        evidence = load_evidence(store, s.id)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    assert len(seen) == 3
    assert len(evidence.nodes) == store.count_nodes(s.id)
    assert len(evidence.rejected) == 5 and len(evidence.labels) == 5


# -- suggestions --------------------------------------------------------------------------------


def test_suggestions_follow_the_clear_evidence(store: TraceStore) -> None:
    s = SessionBuilder(store, "suggest")
    rejected = s.rejected(1, reason="it deletes the data")
    edited = s.edited(2)
    failed = s.failed(3)
    all_fail = s.executed(4, callbacks={"a": False, "b": "KeyError: 'x'"})
    all_pass = s.executed(5, callbacks={"a": True, "b": True})
    mixed = s.executed(6, callbacks={"a": True, "b": False})
    none = s.executed(7, callbacks={})

    def of(node_id: int, outcome_id: int | None) -> Suggestion | None:
        node = store.get_node(node_id)
        results = store.evaluations(outcome_id) if outcome_id else []
        return suggest(node, store.decisions(node_id), results)

    assert of(rejected.more["rejected"].id, rejected.end.id) == Suggestion(
        LabelValue.BAD, "the operator rejected it: it deletes the data"
    )
    assert of(edited.more["edited"].id, None) == Suggestion(
        LabelValue.BAD, "the operator rewrote it"
    )
    assert of(failed.more["failed"].id, None) == Suggestion(
        LabelValue.BAD, "it raised: ZeroDivisionError: division by zero"
    )
    assert of(all_fail.action.id, all_fail.end.id) == Suggestion(
        LabelValue.BAD, "every evaluation of its tick failed (2)"
    )
    assert of(all_pass.action.id, all_pass.end.id) == Suggestion(
        LabelValue.GOOD, "it ran and every evaluation of its tick passed (2)"
    )
    assert of(mixed.action.id, mixed.end.id) is None
    assert of(none.action.id, none.end.id) is None
    # an alternate shares its tick's evaluations with the action that ran: no suggestion
    assert of(all_pass.alternates[0].id, all_pass.end.id) is None


def test_a_policy_rejection_suggests_nothing(store: TraceStore) -> None:
    s = SessionBuilder(store, "policy")
    s.start(1)
    action, _ = s.candidates(1, "x = 1", [])
    store.record_decision(action.id, Verdict.REJECT, reason="dry run", actor=Actor.POLICY)
    node = store.update_node(action.id, status=NodeStatus.REJECTED)
    assert suggest(node, store.decisions(action.id), []) is None


# -- the label queue ---------------------------------------------------------------------------


def test_the_queue_lists_unlabelled_actions_newest_first(store: TraceStore) -> None:
    first = SessionBuilder(store, "first")
    f1 = first.executed(1)
    f2 = first.rejected(2)
    second = SessionBuilder(store, "second")
    s1 = second.picked(1)
    s2 = second.unfinished(2)

    page = load_queue_page(store)
    assert [item.node.id for item in page.items] == [
        # session 2, tick 2: the chosen action, then its alternate (node id desc)
        s2.alternates[0].id,
        s2.action.id,
        # session 2, tick 1
        s1.alternates[0].id,
        s1.action.id,
        s1.more["replaced"].id,
        # session 1, tick 2
        f2.action.id,
        f2.more["rejected_alternate"].id,
        f2.more["rejected"].id,
        # session 1, tick 1
        f1.alternates[0].id,
        f1.action.id,
    ]
    assert sorted([item.node.id for item in page.items]) == sorted(
        n.id for sid in (first.id, second.id) for n in store.tree(sid) if n.kind == "action"
    )
    assert page.left == 10 and not page.more
    assert {item.session_title for item in page.items} == {"first", "second"}
    assert [i.key for i in page.items] == sorted((i.key for i in page.items), reverse=True)


def test_labels_take_branches_out_of_the_queue(store: TraceStore) -> None:
    s = SessionBuilder(store, "one")
    one = s.executed(1)
    two = s.executed(2)
    three = s.executed(3)
    queued = lambda: [i.node.id for i in load_queue_page(store).items]  # noqa: E731
    assert len(queued()) == 6

    block = store.add_label(three.alternates[0].id, LabelValue.GOOD)
    assert three.alternates[0].id not in queued()
    # a block label on another block (the expectation) covers nothing else
    store.add_label(two.exp.id, LabelValue.BAD)
    assert two.action.id in queued()
    # a path label on the tick-2 outcome covers the actions of ticks 1 and 2 on the path
    store.add_label(two.end.id, LabelValue.GOOD, scope=LabelScope.PATH)
    assert queued() == [three.action.id, two.alternates[0].id, one.alternates[0].id]
    store.retract_label(block.id)
    assert queued()[0] == three.alternates[0].id
    # the path label loses its effect when a newer block label takes its place
    store.add_label(two.end.id, LabelValue.GOOD)
    assert one.action.id in queued() and two.action.id in queued()


def test_the_queue_pages_by_key_and_counts_whats_left(store: TraceStore) -> None:
    s = SessionBuilder(store, "pages")
    for tick in range(1, 6):
        s.executed(tick, alternates=2)
    first = load_queue_page(store, limit=4)
    assert len(first.items) == 4 and first.more and first.left == 15
    second = load_queue_page(store, after=first.items[-1].key, limit=4, count=True)
    assert second.left == 11
    assert not {i.node.id for i in first.items} & {i.node.id for i in second.items}
    # labelling the first item does not shift the next page
    store.add_label(first.items[0].node.id, LabelValue.GOOD)
    again = load_queue_page(store, after=first.items[-1].key, limit=4)
    assert [i.node.id for i in again.items] == [i.node.id for i in second.items]
    # `through` starts a page with the item itself
    from_item = load_queue_page(store, after=through(second.items[0].key), limit=1)
    assert from_item.items[0].node.id == second.items[0].node.id
    rest = load_queue_page(store, after=second.items[-1].key, limit=100, count=False)
    assert rest.left is None and not rest.more and len(rest.items) == 7


def test_the_queue_can_be_limited_to_one_session(store: TraceStore) -> None:
    a = SessionBuilder(store, "a")
    a.executed(1)
    b = SessionBuilder(store, "b")
    tb = b.executed(1)
    store.add_label(tb.end.id, LabelValue.BAD, scope=LabelScope.PATH)
    only_a = load_queue_page(store, session_id=a.id)
    assert {i.node.session_id for i in only_a.items} == {a.id} and only_a.left == 2
    only_b = load_queue_page(store, session_id=b.id)
    assert [i.node.id for i in only_b.items] == [tb.alternates[0].id] and only_b.left == 1


def test_queue_items_carry_what_the_operator_judges_by(store: TraceStore) -> None:
    s = SessionBuilder(store, "details")
    rejected = s.rejected(1, reason="too risky", callbacks={"tests pass": True, "lint": False})
    edited = s.edited(2)
    t3 = s.executed(3, callbacks={"tests pass": True})
    items = {i.node.id: i for i in load_queue_page(store).items}

    r = items[rejected.more["rejected"].id]
    assert r.decision is not None and r.decision.verdict is Verdict.REJECT
    assert r.decision.reason == "too risky"
    assert (
        r.expectation is not None and r.expectation.id == rejected.more["rejected_expectation"].id
    )
    assert [(e.name, e.passed) for e in r.evaluations] == [("tests pass", True), ("lint", False)]
    assert r.suggestion == Suggestion(LabelValue.BAD, "the operator rejected it: too risky")
    # the tick's last block along its branch: the outcome (the chain goes on after feedback)
    assert r.path_target_id == rejected.end.id

    alternate = items[rejected.more["rejected_alternate"].id]
    assert alternate.path_target_id == alternate.node.id
    assert alternate.expectation is not None
    assert alternate.expectation.id == rejected.more["rejected_expectation"].id
    assert alternate.suggestion is None and alternate.decision is None
    assert [e.name for e in alternate.evaluations] == ["tests pass", "lint"]

    original = items[edited.more["edited"].id]
    assert original.path_target_id == edited.more["edited_expectation"].id
    assert original.expectation is not None
    assert original.expectation.id == edited.more["edited_expectation"].id
    assert original.suggestion == Suggestion(LabelValue.BAD, "the operator rewrote it")
    assert [e.name for e in original.evaluations] == ["check"]  # the tick's, from the edit's

    edit = items[edited.action.id]
    assert edit.node.author is Author.OPERATOR
    assert edit.path_target_id == edited.end.id
    assert edit.suggestion == Suggestion(
        LabelValue.GOOD, "it ran and every evaluation of its tick passed (1)"
    )

    last = items[t3.action.id]
    assert last.path_target_id == t3.end.id
    assert last.expectation is not None and last.expectation.text == "x is set (3)"
    assert all(e.kind is EvaluationKind.CALLBACK for e in last.evaluations)


def test_an_empty_store_has_an_empty_queue(store: TraceStore) -> None:
    page = load_queue_page(store)
    assert page.items == [] and page.left == 0 and not page.more
    assert count_training_data(store) == Counts(0, 0)
    assert store.session_ids() == []


# -- the bulk reads the rules and the queue use --------------------------------------------------


def test_session_ids_since_names_sessions_with_new_activity(store: TraceStore) -> None:
    a = SessionBuilder(store, "a")
    ta = a.executed(1)
    b = SessionBuilder(store, "b")
    b.executed(1)
    c = SessionBuilder(store, "c")
    tc = c.executed(1)
    time.sleep(0.01)
    since = time.time()
    assert store.session_ids() == [a.id, b.id, c.id]
    assert store.session_ids(active_since=since) == []
    label = store.add_label(ta.action.id, LabelValue.GOOD)
    store.record_decision(tc.alternates[0].id, Verdict.APPROVE)
    assert store.session_ids(active_since=since) == [a.id, c.id]
    time.sleep(0.01)
    later = time.time()
    store.retract_label(label.id)
    assert store.session_ids(active_since=later) == [a.id]


def test_bulk_reads_return_what_single_reads_do(store: TraceStore) -> None:
    s = SessionBuilder(store, "bulk")
    t1 = s.rejected(1)
    t2 = s.picked(2)
    other = SessionBuilder(store, "other")
    other.edited(1)
    ids = [n.id for n in store.tree(s.id)]
    expected = sorted((d for i in ids for d in store.decisions(i)), key=lambda d: d.id)
    assert store.session_decisions(s.id) == expected
    assert store.decisions_for(ids) == expected
    outcomes = [t1.end.id, t2.end.id]
    assert store.evaluations_for(outcomes) == [e for i in outcomes for e in store.evaluations(i)]
    assert store.sessions_by_id([s.id, other.id, 999]) == {
        s.id: store.get_session(s.id),
        other.id: store.get_session(other.id),
    }
    tick2 = store.tick_nodes(s.id, [2])
    assert [n.id for n in tick2] == [n.id for n in store.tree(s.id) if n.tick == 2]
    assert store.tick_nodes(s.id, [2], after_id=t2.orientation.id)[0].parent_id == t2.orientation.id
    assert store.decisions_for([]) == [] and store.tick_nodes(s.id, []) == []


@pytest.mark.parametrize("scope", [LabelScope.BLOCK, LabelScope.PATH])
def test_a_label_on_a_runtime_block_is_no_example_but_still_excludes(
    store: TraceStore, scope: LabelScope
) -> None:
    s = SessionBuilder(store, "runtime")
    t = s.executed(1)
    reminder = store.get_node(t.orientation.parent_id or 0)
    assert reminder.author is Author.RUNTIME
    store.add_label(reminder.id, LabelValue.GOOD, scope=scope)
    assert examples(store, s.id) == [t.action.id]  # the approval's; the label adds nothing
    store.add_label(reminder.id, LabelValue.BAD, scope=scope)
    assert examples(store, s.id) == []
    # a block outside the labelled one's line is untouched
    loose = store.add_node(s.id, NewNode("action", "a second root", tick=1, status="approved"))
    assert examples(store, s.id) == [loose.id]


def test_the_tree_outline_is_the_tree_without_its_payload(store: TraceStore) -> None:
    s = SessionBuilder(store, "outline")
    s.edited(1)
    s.rejected(2)
    fields = ("id", "session_id", "parent_id", "tick", "kind", "author", "status")
    more = ("edited_from_id", "created_at", "updated_at")
    outline = store.tree_outline(s.id)
    assert [tuple(getattr(n, f) for f in fields + more) for n in outline] == [
        tuple(getattr(n, f) for f in fields + more) for n in store.tree(s.id)
    ]
    assert any(n.edited_from_id is not None for n in outline)
    assert store.tree_outline(999) == []


def test_the_tally_recounts_only_the_sessions_touched_since(store: TraceStore) -> None:
    a = SessionBuilder(store, "a")
    ta = a.executed(1)
    b = SessionBuilder(store, "b")
    b.edited(1)
    tally = TrainingTally()
    assert tally.refresh(store) == count_training_data(store) == Counts(2, 1)
    before = dict(tally.by_session)

    time.sleep(0.01)
    store.add_label(ta.alternates[0].id, LabelValue.GOOD)
    assert tally.refresh(store) == count_training_data(store) == Counts(3, 1)
    assert tally.by_session[b.id] is before[b.id]  # not read again
    assert tally.by_session[a.id] == Counts(2, 0)

    c = SessionBuilder(store, "c, written meanwhile by the agent")
    c.picked(1)
    assert tally.refresh(store) == count_training_data(store) == Counts(4, 2)

    time.sleep(0.01)
    label = store.label_history(ta.alternates[0].id)[-1]
    store.retract_label(label.id)
    checked = tally.checked_at
    assert tally.refresh(store, should_stop=lambda: True) is None
    assert tally.checked_at == checked  # a stopped refresh leaves it to the next one
    assert tally.refresh(store) == count_training_data(store) == Counts(3, 2)
