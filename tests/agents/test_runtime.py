"""The tick runtime end to end: the tiny real model, the real bubblewrap sandbox, a real
SQLite store. The tiny model writes noise, which is what makes these tests sharp: its
actions don't parse and must be penalised; the operator's edits are what run."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import blocks
from agents.approval import Answer
from agents.events import (
    AgentMessage,
    DecisionRecorded,
    EvaluationRecorded,
    NodeChanged,
    RuntimeEvent,
    StatusChanged,
    StepWaiting,
)
from agents.runtime import Outcome, Runtime
from storage import (
    Actor,
    Author,
    EvaluationKind,
    Node,
    NodeStatus,
    SessionStatus,
    TraceStore,
    Verdict,
)
from tests.support.answer_task import SOLVE, TASK
from tests.support.runs import make_runtime, options

pytestmark = pytest.mark.timeout(300)

HANG = """def hang(subagent):
    while True:
        pass
self.add_action("Spin", hang)"""


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def nodes_in(events: list[RuntimeEvent]) -> list[NodeChanged]:
    return [e for e in events if isinstance(e, NodeChanged)]


def siblings_of(store: TraceStore, node: Node) -> list[Node]:
    assert node.parent_id is not None
    return [n for n in store.children(node.parent_id) if n.kind == node.kind]


def test_a_full_tick_with_an_operator_edit(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    events: list[RuntimeEvent] = []
    runtime, asked = make_runtime(
        sqlite_store, backend, tmp_path, [lambda r: Answer.edit(SOLVE)], events=events
    )
    outcome = runtime.run()
    store = sqlite_store

    assert outcome.status is SessionStatus.COMPLETED, outcome
    assert outcome.message == "I wrote 42 to answer.txt"
    assert store.get_session(outcome.session_id).status is SessionStatus.COMPLETED
    assert (runtime.workdir / "answer.txt").read_text() == "42\n"

    # the model's action: 3 + 2 candidates stored as siblings, scored, with tokens
    assert len(asked) == 1
    original = asked[0].action
    actions = siblings_of(store, original)
    model_actions = [n for n in actions if n.author is Author.MODEL]
    assert len(model_actions) == 5
    assert {n.sampling["round"] for n in model_actions} == {0, 1}
    for node in model_actions:
        assert "evaluator" in node.score_parts
        assert node.score == pytest.approx(sum(node.score_parts.values()))
        full = store.get_node(node.id)
        assert full.token_ids and full.logprobs and len(full.token_ids) == len(full.logprobs)
        assert full.meta["q"] == "Is this action likely to make progress on the task?"
    # noise does not parse: penalised
    assert any(n.score_parts.get("syntax") == -2.0 for n in model_actions)
    # a block that ran out of tokens is closed and marked truncated
    assert any(n.truncated for n in store.tree(outcome.session_id))
    assert store.get_node(original.id).status is NodeStatus.EDITED
    assert sum(n.status is NodeStatus.ALTERNATE for n in model_actions) == 4

    # the operator's edit: a new sibling that ran
    edit = next(n for n in actions if n.author is Author.OPERATOR)
    assert edit.edited_from_id == original.id
    assert edit.status is NodeStatus.EXECUTED
    assert edit.meta["result"] == "written"
    assert edit.meta["messages"] == ["I wrote 42 to answer.txt"]
    assert edit.meta["title"] == "Write the answer"
    assert "evaluator" in edit.score_parts
    (decision,) = store.decisions(original.id)
    assert decision.verdict is Verdict.EDIT and decision.actor is Actor.OPERATOR
    assert decision.result_node_id == edit.id

    # the evaluation callbacks ran in the sandbox and their results are stored
    tree = store.tree(outcome.session_id)
    outcome_node = next(n for n in tree if n.kind == blocks.OUTCOME)
    results = {r.name: r for r in store.evaluations(outcome_node.id)}
    assert results["check_answer"].passed is True
    assert results["check_answer"].kind is EvaluationKind.CALLBACK
    assert results["check_answer"].duration is not None
    logit = results["Does this outcome match the expectation?"]
    assert logit.kind is EvaluationKind.LOGIT and isinstance(logit.result, float)
    assert outcome_node.meta["task_passed"] == 1
    assert "Program: check_answer\nResult: True" in outcome_node.text
    assert outcome_node.meta["reward"] == pytest.approx(0.5)  # 0.5 x 1/1 passed

    # the tick's blocks in order on the path
    path_kinds = [n.kind for n in store.path(outcome_node.id)]
    assert path_kinds[:5] == ["genesis", "task-reminder", "orientation", "action", "expectation"]
    assert path_kinds[-1] == "outcome" and "option" in path_kinds and "evaluation" in path_kinds
    assert store.path(outcome_node.id)[3].id == edit.id

    # events reached the listener: nodes, the decision, evaluations, the final status
    kinds = {type(e) for e in events}
    assert {NodeChanged, DecisionRecorded, EvaluationRecorded, AgentMessage, StatusChanged} <= kinds
    last = events[-1]
    assert isinstance(last, StatusChanged) and last.status is SessionStatus.COMPLETED


def test_every_model_block_re_renders_to_its_stored_prompt(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    """Training depends on it: the prompt re-rendered from the store has the hash
    stored when the block was written, ticks collapsed included."""
    runtime, _ = make_runtime(
        sqlite_store,
        backend,
        tmp_path,
        approval="deny",
        max_ticks=4,
        escalation=(),
        context_tokens=3000,
    )
    outcome = runtime.run()
    assert outcome.status is SessionStatus.TRUNCATED
    model_nodes = [n for n in sqlite_store.tree(outcome.session_id) if n.author is Author.MODEL]
    assert len(model_nodes) > 40
    for node in model_nodes:
        assert node.parent_id is not None
        prefix = blocks.block_prompt(sqlite_store.path(node.parent_id), node)
        assert blocks.prompt_hash(prefix) == node.prompt_hash, node
    # 4 ticks of noise overflow 3,000 tokens of context: old ticks were collapsed
    assert any(node.meta["collapsed"] for node in model_nodes)


def test_a_tick_that_cannot_fit_truncates_the_session(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    runtime, _ = make_runtime(
        sqlite_store, backend, tmp_path, approval="deny", escalation=(), context_tokens=900
    )
    outcome = runtime.run()
    assert outcome.status is SessionStatus.TRUNCATED
    assert outcome.reason == "the context is full: tick 1 alone does not fit in 900 tokens"
    assert sqlite_store.get_session(outcome.session_id).status is SessionStatus.TRUNCATED


def first_answer_then_solve(
    store: TraceStore, backend: object, tmp_path: Path, first: Answer
) -> tuple[Outcome, Node, Node]:
    """A session whose first proposed action gets `first` and whose second is edited
    into SOLVE: it completes. Returns the outcome and the two proposed actions."""
    runtime, asked = make_runtime(
        store, backend, tmp_path, [lambda r: first, lambda r: Answer.edit(SOLVE)]
    )
    outcome = runtime.run()
    assert outcome.status is SessionStatus.COMPLETED
    return outcome, asked[0].action, asked[1].action


def test_rejection_reason_is_feedback_in_the_next_context(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    _, first, second = first_answer_then_solve(
        sqlite_store, backend, tmp_path, Answer.reject("do not touch the network")
    )
    (decision,) = sqlite_store.decisions(first.id)
    assert decision.verdict is Verdict.REJECT and decision.reason == "do not touch the network"
    assert sqlite_store.get_node(first.id).status is NodeStatus.REJECTED
    path = sqlite_store.path(second.id)
    feedback = path[-2]
    assert feedback.kind == "observation" and feedback.meta["title"] == "Operator feedback"
    assert "do not touch the network" in feedback.text
    assert first.id in [n.id for n in path]  # the rejected action stays in the context
    assert second.meta["collapsed"] == [] and "do not touch the network" in blocks.render_context(
        path[:-1]
    )


def test_picking_an_alternate_runs_it(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    runtime, asked = make_runtime(
        sqlite_store,
        backend,
        tmp_path,
        [lambda r: Answer.pick(r.alternates[-1].id)],
        max_ticks=1,
    )
    outcome = runtime.run()
    request = asked[0]
    picked = sqlite_store.get_node(request.alternates[-1].id)
    (decision,) = sqlite_store.decisions(request.action.id)
    assert decision.verdict is Verdict.PICK_ALTERNATE and decision.result_node_id == picked.id
    assert sqlite_store.get_node(request.action.id).status is NodeStatus.ALTERNATE
    # noise does not run: the picked alternate was tried and failed, and an error followed
    assert picked.status in (NodeStatus.EXECUTED, NodeStatus.FAILED)
    children = sqlite_store.children(picked.id)
    assert [c.kind for c in children if c.status is NodeStatus.CHOSEN] == ["expectation"]
    assert outcome.status is SessionStatus.TRUNCATED


def test_a_hung_action_is_killed_and_the_kernel_comes_back(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    runtime, _ = make_runtime(
        sqlite_store,
        backend,
        tmp_path,
        [lambda r: Answer.edit(HANG), lambda r: Answer.edit(SOLVE)],
        action_timeout=2.0,
    )
    outcome = runtime.run()
    assert outcome.status is SessionStatus.COMPLETED
    tree = sqlite_store.tree(outcome.session_id)
    hung = next(n for n in tree if n.author is Author.OPERATOR and "Spin" in n.text)
    assert hung.status is NodeStatus.FAILED and hung.meta.get("killed")
    error = next(n for n in tree if n.kind == "error" and n.parent_id is not None)
    assert error.tick == 1
    solved = next(n for n in tree if n.author is Author.OPERATOR and "42" in n.text)
    assert solved.status is NodeStatus.EXECUTED


def test_the_greedy_pick_samples_the_greedy_candidate_first(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    """With `pick="greedy"` every block's first candidate is sampled greedily (stored at
    temperature 0) and the others at the session's
    temperature."""
    runtime, _ = make_runtime(
        sqlite_store,
        backend,
        tmp_path,
        approval="deny",
        escalation=(),
        pick="greedy",
        max_ticks=1,
        attempts=1,
    )
    runtime.run()
    model_blocks = [n for n in sqlite_store.tree(runtime.session_id) if n.author is Author.MODEL]
    assert model_blocks
    by_parent: dict[tuple[int | None, str], list[Node]] = {}
    for node in model_blocks:
        by_parent.setdefault((node.parent_id, node.kind), []).append(node)
    for siblings in by_parent.values():
        siblings.sort(key=lambda n: n.id)
        temperatures = [n.sampling["temperature"] for n in siblings]
        assert temperatures[0] == 0.0 and all(t > 0 for t in temperatures[1:]), temperatures


def test_policy_deny_runs_nothing_and_truncates(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    runtime, _ = make_runtime(sqlite_store, backend, tmp_path, approval="deny", escalation=())
    outcome = runtime.run()
    assert outcome.status is SessionStatus.TRUNCATED
    assert "tick limit" in (outcome.reason or "")
    decided = list(sqlite_store.iter_decisions())
    assert len(decided) == 3  # three attempts, each rejected by the policy
    assert all(d.decision.actor is Actor.POLICY for d in decided)
    assert all(d.decision.verdict is Verdict.REJECT for d in decided)
    assert not (runtime.workdir / "answer.txt").exists()


def test_operator_chat_enters_as_an_observation(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    runtime, _ = make_runtime(sqlite_store, backend, tmp_path, approval="deny", escalation=())
    runtime.post_message("Please be careful with answer.txt")
    outcome = runtime.run()
    tree = sqlite_store.tree(outcome.session_id)
    chat = [n for n in tree if n.kind == "observation" and n.meta.get("title") == "Operator"]
    assert [n.text for n in chat] == ["Please be careful with answer.txt"]
    assert chat[0].tick == 1


def test_stop_while_waiting_for_the_operator_aborts(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    asked = threading.Event()
    runtime = Runtime(
        sqlite_store,
        backend,  # type: ignore[arg-type]
        TASK,
        options(escalation=()),
        sessions_dir=tmp_path / "sessions",
        asker=lambda request: asked.set(),
    )
    thread = threading.Thread(target=lambda: asked.wait(60) and runtime.stop())
    thread.start()
    outcome = runtime.run()
    thread.join()
    assert outcome.status is SessionStatus.ABORTED
    assert sqlite_store.get_session(outcome.session_id).status is SessionStatus.ABORTED


def test_resume_continues_from_the_last_complete_tick(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    first, _ = make_runtime(sqlite_store, backend, tmp_path, approval="deny", escalation=())
    done = first.run()
    assert done.status is SessionStatus.TRUNCATED
    before = sqlite_store.count_nodes(done.session_id)
    last_outcome = max(
        (n for n in sqlite_store.tree(done.session_id) if n.kind == "outcome"), key=lambda n: n.id
    )
    second = Runtime(
        sqlite_store,
        backend,  # type: ignore[arg-type]
        TASK,
        options(escalation=()),
        sessions_dir=tmp_path / "sessions",
        asker=lambda r: r.future.set_result(Answer.edit(SOLVE)),
        resume=done.session_id,
    )
    again = second.run()
    assert again.session_id == done.session_id
    assert again.status is SessionStatus.COMPLETED
    tree = sqlite_store.tree(done.session_id)
    assert len(tree) > before
    reminders = [n for n in tree if n.kind == "task-reminder"]
    assert reminders[-1].tick == 2 and reminders[-1].parent_id == last_outcome.id
    assert (second.workdir / "answer.txt").read_text() == "42\n"


def test_regenerate_samples_the_action_again_and_runs_nothing(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    outcome, first, second = first_answer_then_solve(
        sqlite_store, backend, tmp_path, Answer.regenerate("try another way")
    )
    assert first.id != second.id
    (decision,) = sqlite_store.decisions(first.id)
    assert decision.verdict is Verdict.REGENERATE and decision.reason == "try another way"
    assert decision.actor is Actor.OPERATOR
    assert sqlite_store.get_node(first.id).status is NodeStatus.ALTERNATE
    # the new candidates are siblings of the old ones: same parent, one tick
    assert second.parent_id == first.parent_id and second.tick == first.tick
    path_ids = [n.id for n in sqlite_store.path(second.id)]
    expectations = [n.id for n in sqlite_store.children(first.id) if n.kind == "expectation"]
    assert expectations and first.id not in path_ids
    assert not set(expectations) & set(path_ids)
    # a regeneration is not a failed attempt: no action failed, nothing ran for it
    tree = sqlite_store.tree(outcome.session_id)
    assert not [n for n in tree if n.kind == "action" and n.status is NodeStatus.FAILED]
    assert "ok" not in sqlite_store.get_node(first.id).meta  # no call result recorded


def test_step_mode_makes_one_block_per_step_then_runs_freely(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    events: list[RuntimeEvent] = []
    runtime, _ = make_runtime(
        sqlite_store, backend, tmp_path, approval="deny", escalation=(), events=events
    )
    runtime.set_stepping("block")
    done: list[object] = []
    thread = threading.Thread(target=lambda: done.append(runtime.run()))
    thread.start()

    def waiting_steps() -> int:
        return sum(1 for e in events if isinstance(e, StepWaiting))

    def settle(steps: int) -> None:
        deadline = time.monotonic() + 60
        while waiting_steps() < steps and time.monotonic() < deadline:
            time.sleep(0.02)
        assert waiting_steps() == steps

    settle(1)  # even the session's first block waits for a step
    first_wait = len(nodes_in(events))
    time.sleep(0.3)
    assert len(nodes_in(events)) == first_wait  # nothing moves
    runtime.step()
    settle(2)
    made = nodes_in(events)[first_wait:]
    assert [e.node.kind for e in made] == ["genesis"]
    last = events[-1]
    assert isinstance(last, StepWaiting) and last.upcoming == "task-reminder"
    runtime.set_stepping(None)  # run mode: on to the end without another step
    thread.join(60)
    assert not thread.is_alive() and done
    assert waiting_steps() == 2


def test_step_mode_by_tick_and_stop_while_waiting(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    events: list[RuntimeEvent] = []
    runtime, _ = make_runtime(
        sqlite_store, backend, tmp_path, approval="deny", escalation=(), events=events
    )
    runtime.set_stepping("tick")
    done: list[Any] = []
    thread = threading.Thread(target=lambda: done.append(runtime.run()))
    thread.start()
    deadline = time.monotonic() + 60
    while not any(isinstance(e, StepWaiting) for e in events) and time.monotonic() < deadline:
        time.sleep(0.02)
    waits = [e for e in events if isinstance(e, StepWaiting)]
    assert [(e.unit, e.upcoming) for e in waits] == [("tick", "tick 1")]
    runtime.stop()
    thread.join(30)
    assert done and done[0].status is SessionStatus.ABORTED
    with pytest.raises(ValueError):
        runtime.set_stepping("line")


def test_a_retry_request_says_which_try_and_why_the_last_did_not_do(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    """The first action (edited into one that raises) fails; the second request of the
    tick is a retry that says so. A regenerated action is no try: its request is not."""
    raising = 'def boom(subagent):\n    raise KeyError("port")\n\nself.add_action("boom", boom)'
    runtime, asked = make_runtime(
        sqlite_store,
        backend,
        tmp_path,
        [lambda r: Answer.edit(raising), lambda r: Answer.edit(SOLVE)],
    )
    outcome = runtime.run()
    assert outcome.status is SessionStatus.COMPLETED
    first, second = asked[0], asked[1]
    assert first.retry is None and first.last_outcome is None
    (boom,) = [
        n
        for n in sqlite_store.tree(outcome.session_id)
        if n.status is NodeStatus.FAILED and n.text == raising
    ]
    assert second.action.tick == boom.tick
    assert second.retry == f"try 2 of 3: action #{boom.id} failed: KeyError: 'port'"


def test_a_new_session_never_sees_files_left_under_its_id(backend: object, tmp_path: Path) -> None:
    """Two stores sharing one sessions folder (a store made again, say) both have a
    session 1: the second starts with the task's files only, and the first's work
    directory is moved aside, not deleted."""
    with TraceStore(tmp_path / "one.db") as first_store:
        first, _ = make_runtime(first_store, backend, tmp_path, [lambda r: Answer.edit(SOLVE)])
        assert first.run().status is SessionStatus.COMPLETED
    assert (tmp_path / "sessions" / "1" / "work" / "answer.txt").exists()
    with TraceStore(tmp_path / "two.db") as second_store:
        second, _ = make_runtime(second_store, backend, tmp_path, approval="deny")
        outcome = second.run()
        assert outcome.session_id == 1
        assert sorted(p.name for p in second.workdir.iterdir()) == ["question.txt"]
    (aside,) = (tmp_path / "sessions").glob("1.stale-*")
    assert (aside / "work" / "answer.txt").read_text() == "42\n"
