"""Rendering blocks and contexts, ranking candidates, and the approval gate (no model, no
sandbox: these are pure functions over stored nodes, checked against a real store)."""

from __future__ import annotations

import random
import threading
import time

import pytest

from agents import blocks, ranking
from agents.approval import Aborted, Answer, ApprovalRequest, Gate
from agents.blocks import Header
from storage import Actor, Author, NewNode, NodeStatus, TraceStore, Verdict

ACTION = """def check_key(subagent):
    return subagent.read_file("solution.txt")
self.add_action("Check the key", check_key)"""


def _header(kind: str, index: int, tick: int, title: str | None = None) -> Header:
    return Header(kind, index=index, tick=tick, timestamp=1740912854.126, title=title)


def _add(
    store: TraceStore,
    session: int,
    parent: int | None,
    kind: str,
    text: str,
    tick: int,
    index: int,
    **fields: object,
) -> int:
    meta = {**_header(kind, index, tick).meta(), **fields.pop("meta", {})}  # type: ignore[dict-item]
    node = store.add_node(
        session,
        NewNode(kind=kind, text=text, tick=tick, parent_id=parent, meta=meta, **fields),  # type: ignore[arg-type]
    )
    return node.id


def test_action_block_renders_like_weave_agent() -> None:
    header = _header("action", 17, 4)
    assert header.text() == ("#startblock type: action\n#index 17\n#timestamp 1740912854.13\n\n")


def test_q_line_is_deterministic_and_prints_the_likelier_answer() -> None:
    assert blocks.q_line("Is it good?", 1.46) == "#q: Is it good? Yes. (81.2%)"
    assert blocks.q_line("Is it good?", -1.46) == "#q: Is it good? No. (81.2%)"
    assert blocks.q_line("Is it good?", float("nan")) == "#q: Is it good? Yes. (50.0%)"
    assert blocks.q_line("Is it good?", 1e9).endswith("Yes. (100.0%)")


def test_render_of_each_kind(store: TraceStore) -> None:
    session = store.create_session("t").id
    root = _add(store, session, None, "genesis", "the task", 0, 0, author=Author.RUNTIME)
    obs = _add(
        store,
        session,
        root,
        "observation",
        "line one\nline two",
        1,
        1,
        meta={"title": "Files"},
        author=Author.RUNTIME,
    )
    act = _add(
        store,
        session,
        obs,
        "action",
        ACTION,
        1,
        2,
        score=1.2,
        score_parts={"evaluator": 1.46, "lint": -0.26},
        meta={"q": blocks.QUESTIONS["action"]},
    )
    err = _add(store, session, act, "error", "Traceback ...", 1, 3, author=Author.RUNTIME)
    opt = _add(
        store,
        session,
        err,
        "option",
        "No.",
        1,
        4,
        author=Author.RUNTIME,
        score_parts={"evaluator": -0.5},
        meta={"q": blocks.OPTION_QUESTION},
    )
    nodes = {n.id: n for n in store.tree(session)}
    assert blocks.render_block(nodes[obs]).endswith(
        "#timestamp 1740912854.13\n#title Files\n\n# line one\n# line two\n\n#endblock\n"
    )
    rendered = blocks.render_block(nodes[act])
    assert rendered.startswith("#startblock type: action\n#index 2\n")
    assert rendered.endswith(
        ACTION + "\n#q: Is this action likely to make progress on the task? Yes. (81.2%)\n"
        "#endblock\n"
    )
    assert blocks.ERROR_WARNING in blocks.render_block(nodes[err])
    assert blocks.render_block(nodes[opt]).startswith(f"#q: {blocks.OPTION_QUESTION} No. (")


def _session_of_ticks(store: TraceStore, ticks: int) -> int:
    session = store.create_session("t").id
    parent = _add(store, session, None, "genesis", "the task: break the cipher", 0, 0)
    index = 1
    for tick in range(1, ticks + 1):
        for kind, text in (
            ("task-reminder", "Task: break the cipher"),
            ("orientation", f"Tick {tick}: I should look at the file. " * 8),
            ("action", ACTION),
            ("outcome", blocks.outcome_table([("action: Check the key", "'KEY'")])),
        ):
            meta = {"title": "Check the key"} if kind == "action" else {}
            if kind == "outcome":
                meta = {"passed": 1, "total": 2}
            parent = _add(store, session, parent, kind, text, tick, index, meta=meta)
            index += 1
    return parent


def test_context_is_deterministic_and_round_trips_from_the_store(store: TraceStore) -> None:
    head = _session_of_ticks(store, 5)
    path = store.path(head)
    first = blocks.render_context(path)
    again = blocks.render_context(store.path(head))
    assert first == again
    assert first.count("#startblock") == 1 + 5 * 4
    assert first.startswith("#startblock type: genesis\n#index 0\n")
    # the same bytes after the store is closed and opened again
    url = store.url
    store.close()
    with TraceStore(url) as reopened:
        assert blocks.render_context(reopened.path(head)) == first


def test_over_budget_the_oldest_ticks_collapse(store: TraceStore) -> None:
    path = store.path(_session_of_ticks(store, 6))
    full = blocks.render_context(path)
    count = len  # one "token" per character keeps the arithmetic visible
    text, collapsed, tokens = blocks.fit_context(path, len(full) // 2, count)
    assert len(text) <= len(full) // 2 and tokens <= len(full) // 2
    assert collapsed == sorted(collapsed) and collapsed[0] == 1
    assert 0 not in collapsed and 5 not in collapsed and 6 not in collapsed
    assert "#tick 1 (collapsed): action 'Check the key' (proposed); 1/2 evaluations passed" in text
    assert text.startswith("#startblock type: genesis")  # the task stays whole
    assert text == blocks.render_context(path, collapsed)  # re-rendered from the record
    # within budget nothing collapses
    # (one token of slack per block: a BPE merge across a block boundary)
    assert blocks.fit_context(path, len(full) + len(path), count) == (full, [], len(full))
    # what cannot be collapsed is reported over budget
    assert blocks.fit_context(path, 10, count).tokens > 10


def test_penalties() -> None:
    assert ranking.penalties("action", "   ", []) == {"empty": ranking.EMPTY_PENALTY}
    assert ranking.penalties("action", "def f(:\n", [])["syntax"] == ranking.SYNTAX_PENALTY
    assert ranking.penalties("action", "x = 1", []) == {"lint": ranking.LINT_PENALTY}
    assert ranking.penalties("action", ACTION, []) == {}
    assert ranking.penalties("action", ACTION, [ACTION + " "]) == {
        "repetition": ranking.REPEAT_PENALTY
    }
    assert ranking.penalties("orientation", "def f(:", []) == {}  # prose is not parsed


def test_a_near_copy_of_any_earlier_block_is_repetition() -> None:
    said = "I will read the failing test first, then open the module it imports."
    near = said.replace("first", "frst")  # one letter apart
    other = "The outcome shows two passing checks; next I write the summary file."
    repeated = {"repetition": ranking.REPEAT_PENALTY}
    assert ranking.penalties("orientation", near, [other, said]) == repeated
    assert ranking.penalties("orientation", near, [other]) == {}
    # short texts are only ever exact copies
    assert ranking.penalties("orientation", "Read it.", ["Read it!"]) == {}
    # a passage copied out of a longer block is a copy (a task reminder said back)
    assert ranking.penalties("orientation", said, ["Task: " + said * 3 + other]) == repeated
    # and so is a patchwork of passages from several blocks
    assert ranking.penalties("orientation", said + " " + other, [other, said]) == repeated
    # text that shares a phrase with earlier blocks but says something new is not
    fresh = "I will read the failing test first; its traceback names parse_row in rows.py."
    assert ranking.penalties("orientation", fresh, [said, other]) == {}


def test_ranking_and_escalation_rule() -> None:
    scored = ranking.score_candidates(
        "action", ["def f(:", ACTION, "x = 1"], [3.0, 0.5, 2.0], earlier=[]
    )
    assert [s.score for s in scored] == [1.0, 0.5, 1.5]
    assert ranking.pick(scored, "best", random.Random(0)) == 2
    assert not ranking.good_enough("action", scored, threshold=2.0)
    assert ranking.good_enough("action", scored, threshold=1.5)
    broken = ranking.score_candidates("action", ["def f(:"], [9.0], earlier=[])
    assert not ranking.good_enough("action", broken, threshold=0.0)
    # a softmax draw among the code that parses: never the broken one, whatever its score
    draws = {ranking.pick(scored, "softmax", random.Random(seed)) for seed in range(50)}
    assert draws == {1, 2}
    assert ranking.pick(broken + scored[1:], "best", random.Random(0)) == 2
    other_action = ACTION.replace("Check the key", "Read the key")
    # "greedy": the first (greedy) candidate, unless another beats it by the margin or it
    # is ruled out (a copy, code that does not parse)
    close = ranking.score_candidates(
        "action", [ACTION, other_action], [1.0, 1.0 + ranking.GREEDY_MARGIN], earlier=[]
    )
    assert ranking.pick(close, "greedy", random.Random(0)) == 0
    assert ranking.pick(close, "best", random.Random(0)) == 1
    far = ranking.score_candidates(
        "action", [ACTION, other_action], [1.0, 1.1 + ranking.GREEDY_MARGIN], earlier=[]
    )
    assert ranking.pick(far, "greedy", random.Random(0)) == 1
    assert ranking.pick(scored, "greedy", random.Random(0)) == 2  # the first does not parse
    inf = ranking.score_candidates("orientation", ["ok"], [float("-inf")], earlier=[])
    assert inf[0].parts["evaluator"] == -20.0


def test_registered_titles_and_parse_errors() -> None:
    assert blocks.registered_titles(ACTION, "add_action") == ["Check the key"]
    assert blocks.registered_titles("def f(:", "add_action") == []
    assert blocks.parse_error(ACTION) is None
    assert blocks.parse_error("def f(:") is not None
    assert blocks.parse_error("x = '\\0'") is None
    assert blocks.parse_error("x = 1\0") is not None


# -- the approval gate -----------------------------------------------------------------


def _request(store: TraceStore, score: float) -> ApprovalRequest:
    session = store.create_session("t").id
    node = store.add_node(session, NewNode(kind="action", text=ACTION, score=score))
    return ApprovalRequest(session, node, None, [], "why")


def test_policies_without_an_operator(store: TraceStore) -> None:
    stop = threading.Event()
    low, high = _request(store, 0.5), _request(store, 5.0)
    assert Gate("auto", 2.0).decide(low, stop) == (Answer.approve(), Actor.POLICY)
    verdict, actor = Gate("deny", 2.0).decide(high, stop)
    assert verdict.verdict is Verdict.REJECT and actor is Actor.POLICY
    assert Gate("evaluated", 2.0).decide(high, stop)[0] == Answer.approve()
    verdict, _ = Gate("evaluated", 2.0).decide(low, stop)
    assert verdict.verdict is Verdict.REJECT and "no operator" in (verdict.reason or "")
    verdict, _ = Gate("ask", 2.0).decide(high, stop)
    assert verdict.verdict is Verdict.REJECT


def test_ask_waits_for_the_operator_on_another_thread(store: TraceStore) -> None:
    asked: list[ApprovalRequest] = []

    def asker(request: ApprovalRequest) -> None:
        asked.append(request)
        threading.Timer(0.2, request.future.set_result, [Answer.edit("x = 2")]).start()

    request = _request(store, 9.0)
    started = time.monotonic()
    decision, actor = Gate("ask", 2.0, asker).decide(request, threading.Event())
    assert asked == [request]
    assert decision == Answer.edit("x = 2") and actor is Actor.OPERATOR
    assert time.monotonic() - started >= 0.2


def test_stop_while_waiting_aborts(store: TraceStore) -> None:
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()
    with pytest.raises(Aborted):
        Gate("ask", 2.0, lambda request: None).decide(_request(store, 0.0), stop)


def test_edited_and_stored_statuses_exist() -> None:
    # the statuses the runtime moves nodes through
    assert {s.value for s in NodeStatus} >= {
        "chosen",
        "alternate",
        "approved",
        "edited",
        "rejected",
        "executed",
        "failed",
    }
