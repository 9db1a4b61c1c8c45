"""Every `TraceStore` method against a real SQLite file and a real PostgreSQL database."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from storage import (
    Actor,
    Author,
    CheckCounts,
    EvaluationKind,
    JobKind,
    JobStatus,
    LabelScope,
    LabelValue,
    NewNode,
    NodeStatus,
    NotATraceStoreError,
    NotFoundError,
    SessionStatus,
    StoreError,
    TraceStore,
    Verdict,
    count_checks,
)


def _node(text: str, kind: str = "action", **fields: Any) -> NewNode:
    return NewNode(kind=kind, text=text, **fields)


@contextmanager
def _statements(store: TraceStore) -> Iterator[list[str]]:
    """The queries the store sends through its read engine meanwhile (not BEGIN etc.)."""
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if statement.split(None, 1)[0].upper() not in {"BEGIN", "COMMIT", "ROLLBACK"}:
            seen.append(statement)

    engine = store.db.reader  # the only way to watch the queries; the API hides engines
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def _chain(store: TraceStore, session_id: int, length: int) -> list[int]:
    """A root and `length - 1` descendants, each under the previous, in one batch."""
    batch = [_node("n0")] + [_node(f"n{i}", parent_index=i - 1) for i in range(1, length)]
    return [n.id for n in store.add_nodes(session_id, batch)]


# -- opening -------------------------------------------------------------------------------


def test_missing_folder_is_a_store_error(tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "folder" / "traces.db"
    with pytest.raises(StoreError, match="does not exist"):
        TraceStore(target)
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("db", [":memory:", "sqlite://", "sqlite:///:memory:", "", "  "])
def test_in_memory_or_empty_location_is_refused(db: str) -> None:
    with pytest.raises(StoreError):
        TraceStore(db)


def test_random_bytes_are_not_a_trace_store_and_stay_untouched(tmp_path: Path) -> None:
    target = tmp_path / "junk.db"
    target.write_bytes(os.urandom(8192))
    before = target.read_bytes()
    with pytest.raises(NotATraceStoreError, match="not a SQLite database"):
        TraceStore(target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junk.db"]


def test_someone_elses_database_is_refused_and_not_modified(tmp_path: Path) -> None:
    target = tmp_path / "other.db"
    with sqlite3.connect(target) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.close()
    before = target.read_bytes()
    with pytest.raises(NotATraceStoreError, match="customers"):
        TraceStore(target)
    assert target.read_bytes() == before
    with sqlite3.connect(target) as conn:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()
    assert names == ["customers"]


def test_reopening_keeps_data(db_url: str) -> None:
    with TraceStore(db_url) as first:
        session = first.create_session("persist me")
        first.add_node(session.id, _node("root"))
    with TraceStore(db_url) as second:
        assert second.get_session(session.id).task == "persist me"
        assert [n.text for n in second.tree(session.id)] == ["root"]


def test_sqlite_store_uses_wal(sqlite_file: Path) -> None:
    TraceStore(sqlite_file).close()
    with sqlite3.connect(sqlite_file) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


# -- sessions ------------------------------------------------------------------------------


def test_create_and_get_session_round_trips(store: TraceStore) -> None:
    settings = {"temperature": 0.7, "nested": {"n": [1, 2, 3]}, "unicode": "héllo ✓"}
    created = store.create_session(
        "find the key",
        title="Key hunt",
        backend="vllm",
        model="qwen",
        adapter="sft-1",
        settings=settings,
        status="waiting",
    )
    assert created.id > 0
    assert created.status is SessionStatus.WAITING
    assert created.created_at == created.updated_at
    fetched = store.get_session(created.id)
    assert fetched == created
    assert fetched.settings == settings


def test_create_session_defaults(store: TraceStore) -> None:
    session = store.create_session("t")
    assert (session.title, session.backend, session.model, session.adapter) == (
        "",
        None,
        None,
        None,
    )
    assert session.settings == {}
    assert session.status is SessionStatus.RUNNING


def test_get_missing_session(store: TraceStore) -> None:
    with pytest.raises(NotFoundError, match="no session 12345"):
        store.get_session(12345)


def test_create_session_bad_status(store: TraceStore) -> None:
    with pytest.raises(ValueError, match="SessionStatus"):
        store.create_session("t", status="sleeping")
    assert store.list_sessions() == []


def test_list_sessions_order_filter_and_paging(store: TraceStore) -> None:
    a = store.create_session("a")
    b = store.create_session("b")
    c = store.create_session("c", status=SessionStatus.COMPLETED)
    assert [s.id for s in store.list_sessions()] == [c.id, b.id, a.id]

    # Touching a session (a new node) moves it to the front.
    store.add_node(a.id, _node("root"))
    assert [s.id for s in store.list_sessions()] == [a.id, c.id, b.id]
    store.set_session_status(b.id, "failed")
    assert [s.id for s in store.list_sessions()] == [b.id, a.id, c.id]

    assert [s.id for s in store.list_sessions(status="running")] == [a.id]
    assert [s.id for s in store.list_sessions(status=SessionStatus.FAILED)] == [b.id]
    assert store.list_sessions(status="aborted") == []
    assert [s.id for s in store.list_sessions(limit=2)] == [b.id, a.id]
    assert [s.id for s in store.list_sessions(limit=2, offset=2)] == [c.id]
    assert store.list_sessions(offset=3) == []
    with pytest.raises(ValueError):
        store.list_sessions(status="nope")


def test_set_session_status(store: TraceStore) -> None:
    session = store.create_session("t")
    store.set_session_status(session.id, SessionStatus.TRUNCATED)
    after = store.get_session(session.id)
    assert after.status is SessionStatus.TRUNCATED
    assert after.updated_at >= session.updated_at
    with pytest.raises(NotFoundError):
        store.set_session_status(999_999, "completed")
    with pytest.raises(ValueError):
        store.set_session_status(session.id, "bogus")
    assert store.get_session(session.id).status is SessionStatus.TRUNCATED


# -- nodes ---------------------------------------------------------------------------------


def test_add_node_and_get_node_round_trip(store: TraceStore) -> None:
    session = store.create_session("t")
    token_ids = [0, 1, 151_643, 2**31 - 1]
    logprobs = [-0.0, -0.1234567890123, -12.5, -1e-300]
    new = NewNode(
        kind="orientation",
        text="# thinking\nabout ✓ things",
        tick=3,
        author=Author.OPERATOR,
        status=NodeStatus.CHOSEN,
        score=1.75,
        score_parts={"logit": 2.25, "compile": -0.5},
        token_ids=token_ids,
        logprobs=logprobs,
        sampling={"temperature": 0.9, "stop": ["#endblock"]},
        truncated=True,
        prompt_hash="ab" * 32,
        meta={"attempt": 2},
    )
    added = store.add_node(session.id, new)
    got = store.get_node(added.id)
    assert got == added
    assert got.token_ids == token_ids
    # Logprobs are stored as float32: what add_node returned is what reads back.
    assert got.logprobs == pytest.approx(logprobs, rel=1e-6, abs=1e-30)
    assert got.author is Author.OPERATOR
    assert got.status is NodeStatus.CHOSEN
    assert got.truncated is True
    assert got.score_parts == {"logit": 2.25, "compile": -0.5}
    assert got.sampling == {"temperature": 0.9, "stop": ["#endblock"]}
    assert (got.session_id, got.parent_id, got.tick) == (session.id, None, 3)


def test_add_node_defaults(store: TraceStore) -> None:
    session = store.create_session("t")
    got = store.get_node(store.add_node(session.id, _node("x")).id)
    assert got.author is Author.MODEL
    assert got.status is NodeStatus.PROPOSED
    assert got.truncated is False
    assert (got.token_ids, got.logprobs, got.score, got.prompt_hash) == (None, None, None, None)
    assert got.score_parts == {} and got.meta == {} and got.sampling == {}


def test_get_missing_node(store: TraceStore) -> None:
    with pytest.raises(NotFoundError, match="no node 4242"):
        store.get_node(4242)


def test_add_nodes_returns_ids_in_batch_order(store: TraceStore) -> None:
    session = store.create_session("t")
    root = store.add_node(session.id, _node("root"))
    batch = [_node(f"c{i}", parent_id=root.id) for i in range(7)]
    added = store.add_nodes(session.id, batch)
    assert [n.text for n in added] == [f"c{i}" for i in range(7)]
    ids = [n.id for n in added]
    assert ids == sorted(ids) and len(set(ids)) == 7
    for node in added:
        assert store.get_node(node.id).text == node.text
    assert store.add_nodes(session.id, []) == []


def test_add_nodes_parent_index_builds_deep_subtree(store: TraceStore) -> None:
    session = store.create_session("t")
    anchor = store.add_node(session.id, _node("anchor"))
    # Entries deliberately interleave depths so ids can't be inferred from position.
    batch = [
        _node("a", parent_id=anchor.id),  # 0
        _node("b", parent_index=0),  # 1
        _node("x"),  # 2, a second root
        _node("c", parent_index=1),  # 3
        _node("b2", parent_index=0),  # 4
        _node("d", parent_index=3),  # 5
        _node("y", parent_index=2),  # 6
        _node("e", parent_index=5),  # 7
    ]
    added = store.add_nodes(session.id, batch)
    by_text = {n.text: n for n in added}
    assert [n.text for n in added] == [n.text for n in batch]
    expected_parent = {
        "a": anchor.id,
        "b": by_text["a"].id,
        "x": None,
        "c": by_text["b"].id,
        "b2": by_text["a"].id,
        "d": by_text["c"].id,
        "y": by_text["x"].id,
        "e": by_text["d"].id,
    }
    for text, parent in expected_parent.items():
        assert by_text[text].parent_id == parent
        assert store.get_node(by_text[text].id).parent_id == parent
    assert [n.text for n in store.path(by_text["e"].id)] == ["anchor", "a", "b", "c", "d", "e"]
    assert store.count_nodes(session.id) == 9


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ([_node("ok"), _node("self", parent_index=1)], "earlier entry"),
        ([_node("ok"), _node("fwd", parent_index=2), _node("c")], "earlier entry"),
        ([_node("ok"), _node("neg", parent_index=-1)], "earlier entry"),
        ([_node("ok"), _node("both", parent_index=0, parent_id=1)], "both parent_id and"),
        ([_node("ok"), NewNode(kind="", text="no kind")], "kind"),
        ([_node("ok"), NewNode(kind="a", text="t", author="alien")], "Author"),  # type: ignore[arg-type]
        ([_node("ok"), NewNode(kind="a", text="t", status="pondering")], "NodeStatus"),  # type: ignore[arg-type]
    ],
)
def test_add_nodes_rejects_bad_batches_atomically(
    store: TraceStore, batch: list[NewNode], message: str
) -> None:
    session = store.create_session("t")
    store.add_node(session.id, _node("root"))
    with pytest.raises(ValueError, match=message):
        store.add_nodes(session.id, batch)
    assert store.count_nodes(session.id) == 1


def test_add_nodes_parent_in_another_session(store: TraceStore) -> None:
    one = store.create_session("one")
    two = store.create_session("two")
    foreign = store.add_node(one.id, _node("foreign"))
    with pytest.raises(ValueError, match=f"belongs to session {one.id}"):
        store.add_nodes(two.id, [_node("ok"), _node("bad", parent_id=foreign.id)])
    with pytest.raises(ValueError, match="belongs to session"):
        store.add_node(two.id, _node("bad edit", edited_from_id=foreign.id))
    assert store.count_nodes(two.id) == 0


def test_add_nodes_missing_session_or_parent(store: TraceStore) -> None:
    session = store.create_session("t")
    with pytest.raises(NotFoundError, match="no session 777"):
        store.add_node(777, _node("orphan"))
    with pytest.raises(NotFoundError, match="no node 888"):
        store.add_node(session.id, _node("orphan", parent_id=888))
    with pytest.raises(NotFoundError, match="no node 889"):
        store.add_node(session.id, _node("orphan", edited_from_id=889))
    assert store.count_nodes(session.id) == 0


def test_add_nodes_touches_session(store: TraceStore) -> None:
    session = store.create_session("t")
    node = store.add_node(session.id, _node("x"))
    assert store.get_session(session.id).updated_at == node.created_at
    assert node.created_at >= session.updated_at


def test_edit_is_a_sibling_pointing_at_its_original(store: TraceStore) -> None:
    session = store.create_session("t")
    root = store.add_node(session.id, _node("root"))
    original = store.add_node(session.id, _node("model says", parent_id=root.id))
    edit = store.add_node(
        session.id,
        _node(
            "operator says", parent_id=root.id, author=Author.OPERATOR, edited_from_id=original.id
        ),
    )
    assert store.get_node(edit.id).edited_from_id == original.id
    assert store.get_node(original.id).text == "model says"
    assert [n.id for n in store.children(root.id)] == [original.id, edit.id]


def test_children(store: TraceStore) -> None:
    session = store.create_session("t")
    root, *kids = store.add_nodes(
        session.id,
        [
            _node("root"),
            _node("k1", parent_index=0, token_ids=[1, 2]),
            _node("k2", parent_index=0),
            _node("grandchild", parent_index=1),
        ],
    )
    light = store.children(root.id)
    assert [n.text for n in light] == ["k1", "k2"]
    assert all(n.token_ids is None and n.logprobs is None for n in light)
    assert store.children(root.id, with_tokens=True)[0].token_ids == [1, 2]
    assert [n.text for n in store.children(kids[0].id)] == ["grandchild"]
    assert store.children(kids[2].id) == []
    assert store.children(987_654) == []


def test_path_is_root_first(store: TraceStore) -> None:
    session = store.create_session("t")
    ids = _chain(store, session.id, 12)
    sibling = store.add_node(session.id, _node("side", parent_id=ids[5]))
    with _statements(store) as sql:
        path = store.path(ids[-1])
    assert len(sql) == 1 and "WITH RECURSIVE" in sql[0].upper()
    assert [n.id for n in path] == ids
    assert path[0].parent_id is None
    assert all(child.parent_id == parent.id for parent, child in pairwise(path))
    assert [n.id for n in store.path(sibling.id)] == [*ids[:6], sibling.id]
    assert [n.id for n in store.path(ids[0])] == [ids[0]]
    assert all(n.token_ids is None for n in path)
    with pytest.raises(NotFoundError):
        store.path(123_456)


def test_path_with_tokens(store: TraceStore) -> None:
    session = store.create_session("t")
    _, leaf = store.add_nodes(
        session.id,
        [
            _node("r", token_ids=[5], logprobs=[-0.5]),
            _node("l", parent_index=0, token_ids=[6, 7], logprobs=[-1.0, -2.0]),
        ],
    )
    path = store.path(leaf.id, with_tokens=True)
    assert [(n.token_ids, n.logprobs) for n in path] == [([5], [-0.5]), ([6, 7], [-1.0, -2.0])]


def test_tree_and_count(store: TraceStore) -> None:
    one = store.create_session("one")
    two = store.create_session("two")
    ids = _chain(store, one.id, 5)
    store.add_nodes(two.id, [_node("other")])
    store.add_node(one.id, _node("late root", token_ids=[9, 9], logprobs=[-1.0, -1.0]))

    with _statements(store) as sql:
        tree = store.tree(one.id)
    assert len(sql) == 1
    assert [n.id for n in tree][:5] == ids
    assert len(tree) == 6 and {n.session_id for n in tree} == {one.id}
    assert all(n.token_ids is None and n.logprobs is None for n in tree)
    seen: set[int] = set()
    for n in tree:  # parents before children
        assert n.parent_id is None or n.parent_id in seen
        seen.add(n.id)
    assert store.tree(one.id, with_tokens=True)[-1].token_ids == [9, 9]
    assert store.count_nodes(one.id) == 6
    assert store.count_nodes(two.id) == 1
    assert store.count_nodes(424_242) == 0
    assert store.tree(424_242) == []


def test_set_node_status(store: TraceStore) -> None:
    session = store.create_session("t")
    node = store.add_node(session.id, _node("x"))
    store.set_node_status(node.id, NodeStatus.APPROVED)
    assert store.get_node(node.id).status is NodeStatus.APPROVED
    store.set_node_status(node.id, "executed")
    after = store.get_node(node.id)
    assert after.status is NodeStatus.EXECUTED
    assert after.updated_at >= node.updated_at
    with pytest.raises(NotFoundError):
        store.set_node_status(node.id + 1000, "approved")
    with pytest.raises(ValueError, match="NodeStatus"):
        store.set_node_status(node.id, "vaporised")
    assert store.get_node(node.id).status is NodeStatus.EXECUTED


def test_update_node_merges_meta_and_keeps_text(store: TraceStore) -> None:
    session = store.create_session("t")
    node = store.add_node(session.id, NewNode(kind="action", text="x = 1", meta={"index": 3}))
    after = store.update_node(node.id, status="executed", meta={"result": [1, "two"]})
    assert after.status is NodeStatus.EXECUTED
    assert after.meta == {"index": 3, "result": [1, "two"]}
    assert after.text == "x = 1"
    again = store.update_node(node.id, meta={"index": 4})
    assert again.meta == {"index": 4, "result": [1, "two"]}
    assert again.status is NodeStatus.EXECUTED
    with pytest.raises(NotFoundError):
        store.update_node(node.id + 1000, meta={"a": 1})


# -- decisions -----------------------------------------------------------------------------


def test_record_decision_and_decisions(store: TraceStore) -> None:
    session = store.create_session("t")
    root, original, edit = store.add_nodes(
        session.id,
        [_node("root"), _node("orig", parent_index=0), _node("edit", parent_index=0)],
    )
    first = store.record_decision(original.id, "reject", actor=Actor.POLICY, reason="unsafe")
    second = store.record_decision(
        original.id, Verdict.EDIT, reason="tweak", result_node_id=edit.id
    )
    store.record_decision(root.id, "approve")
    assert first.verdict is Verdict.REJECT and first.actor is Actor.POLICY
    assert second.result_node_id == edit.id and second.actor is Actor.OPERATOR
    assert store.decisions(original.id) == [first, second]
    assert [d.verdict for d in store.decisions(root.id)] == [Verdict.APPROVE]
    assert store.decisions(edit.id) == []


def test_record_decision_errors(store: TraceStore) -> None:
    session = store.create_session("t")
    node = store.add_node(session.id, _node("x"))
    with pytest.raises(NotFoundError, match="no node 5555"):
        store.record_decision(5555, "approve")
    with pytest.raises(NotFoundError, match="no node 5556"):
        store.record_decision(node.id, "pick_alternate", result_node_id=5556)
    with pytest.raises(ValueError, match="Verdict"):
        store.record_decision(node.id, "shrug")
    with pytest.raises(ValueError, match="Actor"):
        store.record_decision(node.id, "approve", actor="cat")
    assert store.decisions(node.id) == []


# -- labels --------------------------------------------------------------------------------


def test_labels_latest_unretracted_wins(store: TraceStore) -> None:
    session = store.create_session("t")
    node = store.add_node(session.id, _node("x"))
    assert store.label_of(node.id) is None

    good = store.add_label(node.id, "good", note="nice")
    assert good.value is LabelValue.GOOD and good.scope is LabelScope.BLOCK
    assert store.label_of(node.id) == good
    bad = store.add_label(node.id, LabelValue.BAD, scope="path")
    assert store.label_of(node.id) == bad

    retracted = store.retract_label(bad.id)
    assert retracted.id == bad.id and retracted.retracted_at is not None
    assert store.label_of(node.id) == good  # falls back to the previous label

    with pytest.raises(StoreError, match="already retracted"):
        store.retract_label(bad.id)
    with pytest.raises(NotFoundError):
        store.retract_label(bad.id + 1000)

    store.retract_label(good.id)
    assert store.label_of(node.id) is None

    history = store.label_history(node.id)
    assert [lab.id for lab in history] == [good.id, bad.id]
    assert all(lab.retracted_at is not None for lab in history)
    assert history[0].note == "nice" and history[1].scope is LabelScope.PATH


def test_add_label_errors(store: TraceStore) -> None:
    session = store.create_session("t")
    node = store.add_node(session.id, _node("x"))
    with pytest.raises(NotFoundError):
        store.add_label(node.id + 50, "good")
    with pytest.raises(ValueError, match="LabelValue"):
        store.add_label(node.id, "meh")
    with pytest.raises(ValueError, match="LabelScope"):
        store.add_label(node.id, "good", scope="galaxy")
    assert store.label_history(node.id) == []


def test_session_labels(store: TraceStore) -> None:
    one = store.create_session("one")
    two = store.create_session("two")
    a, b, c = store.add_nodes(one.id, [_node("a"), _node("b"), _node("c")])
    other = store.add_node(two.id, _node("other"))
    store.add_label(a.id, "good")
    a_bad = store.add_label(a.id, "bad")
    b_good = store.add_label(b.id, "good")
    b_bad = store.add_label(b.id, "bad")
    store.retract_label(b_bad.id)
    c_only = store.add_label(c.id, "good")
    store.retract_label(c_only.id)
    store.add_label(other.id, "good")

    labels = store.session_labels(one.id)
    assert set(labels) == {a.id, b.id}
    assert labels[a.id] == a_bad
    assert labels[b.id] == b_good
    assert store.session_labels(999_999) == {}


# -- evaluations ---------------------------------------------------------------------------


def test_evaluations_round_trip_json(store: TraceStore) -> None:
    session = store.create_session("t")
    node = store.add_node(session.id, _node("x"))
    payload = {"stdout": "ok ✓", "values": [1, 2.5, None, True], "nested": {"a": {"b": []}}}
    first = store.record_evaluation(
        node.id, "check_file", result=payload, passed=True, duration=0.25
    )
    second = store.record_evaluation(
        node.id,
        "is it progress?",
        kind=EvaluationKind.LOGIT,
        result=[0.5, -1.25],
        passed=False,
        error="Traceback ...",
    )
    third = store.record_evaluation(node.id, "view", kind="observation", result="plain text")
    fourth = store.record_evaluation(node.id, "nothing")

    got = store.evaluations(node.id)
    assert got == [first, second, third, fourth]
    assert got[0].result == payload and got[0].passed is True and got[0].duration == 0.25
    assert got[1].result == [0.5, -1.25] and got[1].passed is False
    assert got[1].kind is EvaluationKind.LOGIT and got[1].error == "Traceback ..."
    assert got[2].result == "plain text" and got[2].passed is None
    assert got[3].result is None and got[3].kind is EvaluationKind.CALLBACK

    with pytest.raises(NotFoundError):
        store.record_evaluation(node.id + 99, "x")
    with pytest.raises(ValueError, match="EvaluationKind"):
        store.record_evaluation(node.id, "x", kind="vibes")
    assert store.evaluations(node.id + 99) == []


def test_session_check_counts_match_counting_the_rows(store: TraceStore) -> None:
    """The tree's per-block counts, read in one query, are what `count_checks` makes of
    the block's rows (what the inspector counts): errors apart, logit questions and
    observation views left out, other sessions' blocks too."""
    session, other = store.create_session("t"), store.create_session("u")
    mixed, clean, unchecked = store.add_nodes(session.id, [_node("a"), _node("b"), _node("c")])
    elsewhere = store.add_node(other.id, _node("d"))
    store.record_evaluation(mixed.id, "passes", result=True, passed=True)
    store.record_evaluation(mixed.id, "fails", result=False, passed=False)
    store.record_evaluation(mixed.id, "no verdict", result="maybe", passed=None)
    store.record_evaluation(mixed.id, "raises", passed=None, error="KeyError: 'x'")
    store.record_evaluation(mixed.id, "raises late", passed=True, error="killed")
    store.record_evaluation(mixed.id, "q?", kind=EvaluationKind.LOGIT, result=-1.0, passed=False)
    store.record_evaluation(clean.id, "passes", result=1, passed=True)
    store.record_evaluation(unchecked.id, "view", kind=EvaluationKind.OBSERVATION, result="x")
    store.record_evaluation(elsewhere.id, "fails", result=False, passed=False)

    with _statements(store) as sql:
        counts = store.session_evaluation_marks(session.id)
    assert len(sql) == 1
    assert counts == {
        mixed.id: CheckCounts(passed=1, failed=2, errored=2),
        clean.id: CheckCounts(passed=1),
    }
    for node in (mixed, clean):
        assert counts[node.id] == count_checks(store.evaluations(node.id))
    assert store.session_evaluation_marks(999_999) == {}


# -- training data -------------------------------------------------------------------------


def test_iter_labelled_yields_effective_labels_only(store: TraceStore) -> None:
    session = store.create_session("t")
    a, b, c, d = store.add_nodes(
        session.id, [_node("a"), _node("b"), _node("c", token_ids=[3]), _node("d")]
    )
    store.add_label(a.id, "bad")
    a_good = store.add_label(a.id, "good", note="changed my mind")
    b_only = store.add_label(b.id, "bad")
    store.retract_label(b_only.id)
    c_good = store.add_label(c.id, "good", scope="path")
    c_bad = store.add_label(c.id, "bad")
    store.retract_label(c_bad.id)

    got = list(store.iter_labelled())
    assert [(x.node.id, x.label.id) for x in got] == [(a.id, a_good.id), (c.id, c_good.id)]
    assert got[0].label.note == "changed my mind"
    assert got[1].label.scope is LabelScope.PATH and got[1].label.value is LabelValue.GOOD
    assert got[1].node.token_ids is None
    assert list(store.iter_labelled(with_tokens=True))[1].node.token_ids == [3]
    assert d.id not in {x.node.id for x in got}


def test_iter_labelled_since(store: TraceStore) -> None:
    session = store.create_session("t")
    old, relabelled, fresh, fell_back = store.add_nodes(
        session.id, [_node("old"), _node("relabelled"), _node("fresh"), _node("fell_back")]
    )
    store.add_label(old.id, "good")
    store.add_label(relabelled.id, "bad")
    store.add_label(fell_back.id, "good")
    cutoff = store.add_label(fresh.id, "good")  # `since` is inclusive
    new_label = store.add_label(relabelled.id, "good")
    retracted = store.add_label(fell_back.id, "bad")
    store.retract_label(retracted.id)  # effective label is the old one again

    got = list(store.iter_labelled(since=cutoff.created_at))
    assert [(x.node.id, x.label.id) for x in got] == [
        (relabelled.id, new_label.id),
        (fresh.id, cutoff.id),
    ]
    assert list(store.iter_labelled(since=new_label.created_at + 3600)) == []


@pytest.mark.parametrize("page_size", [1, 3, 4, 17])
def test_iter_labelled_pages_without_gaps_or_duplicates(store: TraceStore, page_size: int) -> None:
    one = store.create_session("one")
    two = store.create_session("two")
    nodes = store.add_nodes(one.id, [_node(f"a{i}") for i in range(8)])
    nodes += store.add_nodes(two.id, [_node(f"b{i}") for i in range(8)])
    expected = []
    for i, node in enumerate(nodes):
        if i % 5 == 4:
            continue  # unlabelled holes inside pages
        store.add_label(node.id, "good" if i % 2 else "bad")
        if i % 3 == 0:  # several label rows for one node must still yield it once
            expected.append((node.id, store.add_label(node.id, "good").id))
        else:
            expected.append((node.id, store.label_of(node.id).id))  # type: ignore[union-attr]
    got = [(x.node.id, x.label.id) for x in store.iter_labelled(page_size=page_size)]
    assert got == expected
    assert len(expected) == 13  # more than one page for every size tried


def test_iter_decisions(store: TraceStore) -> None:
    session = store.create_session("t")
    nodes = store.add_nodes(session.id, [_node(f"n{i}", token_ids=[i]) for i in range(5)])
    made = [
        store.record_decision(nodes[i % 5].id, "approve" if i % 2 else "reject", reason=str(i))
        for i in range(7)
    ]
    for page_size in (1, 2, 500):
        got = list(store.iter_decisions(page_size=page_size))
        assert [x.decision for x in got] == made
        assert [x.node.id for x in got] == [nodes[i % 5].id for i in range(7)]
        assert all(x.node.token_ids is None for x in got)
    assert list(store.iter_decisions(with_tokens=True))[3].node.token_ids == [3]
    since = [x.decision.id for x in store.iter_decisions(since=made[4].created_at)]
    assert since == [m.id for m in made[4:]]


# -- jobs ----------------------------------------------------------------------------------


def test_create_and_get_job(store: TraceStore) -> None:
    config = {"lr": 2e-5, "epochs": 3, "data": {"since": None}}
    job = store.create_job(JobKind.SFT, "sft-1", base_model="qwen", config=config)
    assert job.status is JobStatus.QUEUED
    assert (job.progress, job.metrics, job.pid, job.error) == (0.0, {}, None, None)
    assert job.started_at is None and job.finished_at is None
    assert store.get_job(job.id) == job
    assert store.get_job(job.id).config == config
    with pytest.raises(NotFoundError):
        store.get_job(job.id + 1)
    with pytest.raises(ValueError, match="JobKind"):
        store.create_job("rlhf", "x")


def test_list_jobs(store: TraceStore) -> None:
    a = store.create_job("sft", "a")
    b = store.create_job("dpo", "b")
    c = store.create_job("sft", "c")
    store.update_job(b.id, status="running")
    assert [j.id for j in store.list_jobs()] == [c.id, b.id, a.id]
    assert [j.id for j in store.list_jobs(status="queued")] == [c.id, a.id]
    assert [j.id for j in store.list_jobs(status=JobStatus.RUNNING)] == [b.id]
    assert [j.id for j in store.list_jobs(limit=1)] == [c.id]
    with pytest.raises(ValueError):
        store.list_jobs(status="exploded")


def test_update_job_stamps_start_once_and_finish(store: TraceStore) -> None:
    job = store.create_job("sft", "j")
    running = store.update_job(job.id, status="running", pid=4321)
    assert running.status is JobStatus.RUNNING and running.pid == 4321
    assert running.started_at is not None and running.finished_at is None
    started = running.started_at

    again = store.update_job(job.id, status=JobStatus.RUNNING, progress=0.5)
    assert again.started_at == started  # not re-stamped
    progressed = store.update_job(job.id, progress=0.75, metrics={"loss": 0.25})
    assert progressed.started_at == started and progressed.progress == 0.75
    assert progressed.metrics == {"loss": 0.25} and progressed.status is JobStatus.RUNNING

    cancelling = store.update_job(job.id, status="cancelling")
    assert cancelling.finished_at is None  # not final yet
    done = store.update_job(job.id, status="completed", progress=1.0)
    assert done.finished_at is not None and done.finished_at >= started
    assert done.started_at == started
    assert store.get_job(job.id) == done


@pytest.mark.parametrize("final", ["completed", "failed", "cancelled"])
def test_update_job_final_statuses_stamp_finished(store: TraceStore, final: str) -> None:
    job = store.create_job("dpo", "j")
    store.update_job(job.id, status="running")
    ended = store.update_job(job.id, status=final, error="boom" if final == "failed" else None)
    assert ended.status is JobStatus(final)
    assert ended.finished_at is not None
    assert ended.updated_at == ended.finished_at


def test_update_job_errors(store: TraceStore) -> None:
    job = store.create_job("sft", "j")
    with pytest.raises(ValueError, match="created_at"):
        store.update_job(job.id, created_at=0.0)
    with pytest.raises(ValueError, match="started_at"):
        store.update_job(job.id, status="running", started_at=1.0)
    with pytest.raises(ValueError, match="JobStatus"):
        store.update_job(job.id, status="sleeping")
    with pytest.raises(NotFoundError):
        store.update_job(job.id + 100, progress=0.5)
    assert store.get_job(job.id) == job


def test_job_events_polling_and_filter(store: TraceStore) -> None:
    job = store.create_job("sft", "j")
    other = store.create_job("sft", "other")
    store.add_job_event(other.id, "log", message="not mine")
    events = [
        store.add_job_event(job.id, "log", message="starting"),
        store.add_job_event(job.id, "metrics", step=10, data={"loss": 1.5}),
        store.add_job_event(job.id, "log", message="halfway"),
        store.add_job_event(job.id, "metrics", step=20, data={"loss": 0.75, "lr": [1, 2]}),
    ]
    assert store.job_events(job.id) == events
    assert events[1].data == {"loss": 1.5} and events[1].step == 10
    assert events[0].data == {} and events[0].step is None

    cursor = events[1].id
    assert store.job_events(job.id, after_id=cursor) == events[2:]
    late = store.add_job_event(job.id, "log", message="late")
    assert store.job_events(job.id, after_id=events[-1].id) == [late]
    assert store.job_events(job.id, after_id=late.id) == []

    assert [e.step for e in store.job_events(job.id, kind="metrics")] == [10, 20]
    assert store.job_events(job.id, kind="metrics", after_id=events[1].id) == [events[3]]
    assert store.job_events(job.id, limit=2) == events[:2]
    with pytest.raises(NotFoundError):
        store.add_job_event(other.id + 100, "log")


# -- adapters ------------------------------------------------------------------------------


def test_adapters(store: TraceStore, tmp_path: Path) -> None:
    job = store.create_job("sft", "j")
    first = store.register_adapter(
        "sft-1", base_model="qwen", path=tmp_path / "a", job_id=job.id, metrics={"loss": 0.5}
    )
    assert first.path == str(tmp_path / "a") and first.job_id == job.id
    second = store.register_adapter("dpo-1", base_model="qwen", path="/b")
    assert store.get_adapter("sft-1") == first
    assert [a.name for a in store.list_adapters()] == ["dpo-1", "sft-1"]

    with pytest.raises(StoreError, match="already exists"):
        store.register_adapter("sft-1", base_model="other", path="/c")
    assert store.get_adapter("sft-1") == first

    replaced = store.register_adapter("sft-1", base_model="other", path="/c", replace_existing=True)
    assert replaced.id == first.id
    assert (replaced.base_model, replaced.path, replaced.job_id) == ("other", "/c", None)
    assert store.get_adapter("sft-1") == replaced
    assert [a.id for a in store.list_adapters()] == [second.id, first.id]

    with pytest.raises(NotFoundError, match="no adapter named 'nope'"):
        store.get_adapter("nope")
    with pytest.raises(NotFoundError, match="no job"):
        store.register_adapter("orphan", base_model="q", path="/d", job_id=job.id + 100)
    assert len(store.list_adapters()) == 2


def test_the_label_queue_leaves_out_blocks_with_no_text(store: TraceStore) -> None:
    """A block with nothing in it has nothing to judge: a toy model's A/B left hundreds
    of blank candidates in the queue."""
    session = store.create_session(task="t")
    kept = store.add_nodes(
        session.id,
        [_node("x = 1", tick=1), _node(" \n\t\r ", tick=1), _node("", tick=1), _node(" y", tick=2)],
    )
    assert [n.id for n in store.label_queue()] == [kept[3].id, kept[0].id]
    assert store.count_label_queue() == 2
