"""weave-agent interoperability against a real store (SQLite and PostgreSQL): importing its
event traces in each vintage of field names, rendering them as weave-agent's
`render_block.py` does, exporting our sessions in its format and back, and training rows
from a labelled imported trace."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents import blocks, weave
from storage import (
    Author,
    EvaluationKind,
    LabelScope,
    LabelValue,
    NodeStatus,
    SessionStatus,
    TraceStore,
)
from tests.support import weave_traces as wt
from tests.support.traces import build_session
from training.datasets import BuildReport, DatasetKind, iter_rows


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def _import(store: TraceStore, *paths: Path) -> weave.ImportReport:
    report = weave.import_paths(store, paths)
    assert not report.failed, [f.describe() for f in report.failed]
    return report


# -- rendering -----------------------------------------------------------------------------

# weave-agent's render_block.py gives these texts for the blocks of `wt.modern()` and
# `wt.legacy()`, except that its `#q:` lines draw the answer at random (ours print the
# likelier one) and it adds a "did it run" `#q:` line to a block with an outcome.
RENDERED = {
    ("modern", 2): "#subagent main\n#startblock type: task-reminder\n#index 2\n"
    "#timestamp 1737530002.3805623\n#time_remaining 21552.5 seconds\n\n"
    "Write hello.txt with a greeting.\n#endblock\n",
    ("modern", 4): "#subagent main\n#startblock type: observation\n#index 4\n"
    "#timestamp 1737530003.6305623\n#title Board\n\n# {'x': 1, 'rows': [1, 2]}\n\n#endblock\n",
    ("modern", 5): "#subagent main\n#startblock type: orientation\n#index 5\n"
    "#timestamp 1737530004.1305623\n#time_remaining 21550.0 seconds\n"
    "#block_size I have 768 tokens (full) to write with\n#bm25_query type:'orientation' +file\n"
    "# Starting new tick with block #5\n# Current Working Directory: /app\n\n"
    "I should write the file.\n#q: Is this orientation good? Yes. (81.8%)\n"
    "#tags: write file\n#endblock\n",
    ("modern", 6): "#startblock type: task-inference\n#index 6\n#timestamp 1737530005.1305623\n"
    "#block_size I have 384 tokens (half) to write with\n# Current Task: (1) Write hello\n"
    "# Task Status: (going) on it\n\n# the task stands\n\n"
    "#q: Is the task list right? Yes. (57.4%)\n#endblock\n",
    ("modern", 7): "#subagent main\n#startblock type: action\n#index 7\n"
    "#timestamp 1737530006.1305623\n#time_remaining 21548.0 seconds\n"
    "#block_size I have 192 tokens (quarter) to write with\n\n"
    + wt.ACTION
    + "\n#q: Is this action good? Yes. (90.0%)\n#endblock\n",
    ("modern", 9): "#q: Do I need new observation views? No. (76.9%)\n",
    ("modern", 12): "#startblock type: debate\n#index 12\n#timestamp 1737530011.1305623\n"
    "{'type': 'debate', 'body': 'an unknown kind of block', 'index': 12, "
    "'timestamp': 1737530011.1305623, 'speaker': 'A'}\n#endblock\n",
    ("modern", 13): "#subagent main\n#startblock type: outcome\n#index 13\n"
    "#timestamp 1737530012.1305623\n#time_remaining 21540.0 seconds\n\n"
    "Evaluation Results:\n--------------------\n"
    "Program: Write the greeting\nResult: True\n--------------------\n"
    "Program: hello.txt says hello\nResult: True\n--------------------\n"
    "Program: greeting is polite\nResult: ERROR\n--------------------\n"
    "Program: word count\nResult: 0\n--------------------\n\n#endblock\n",
    ("legacy", 2): "#startblock type: observation\n#index 2\n#timestamp 1737530002.1305623\n"
    "#title Files\n\n# nothing yet\n\n#endblock\n",
    ("legacy", 5): "#startblock type: error\n#index 5\n#timestamp 1737530005.1305623\n"
    "# WARNING: Error means last callback was not fully executed\n\n"
    '# Action execution failed:\n"""PermissionError"""\n#endblock\n',
}


@pytest.mark.parametrize(("vintage", "number"), sorted(RENDERED))
def test_blocks_render_as_weave_agent_renders_them(
    sqlite_store: TraceStore, tmp_path: Path, vintage: str, number: int
) -> None:
    trace = getattr(wt, vintage)()
    assert blocks.render_weave(trace[number]) == RENDERED[vintage, number]
    # and the imported node renders to the same bytes, through the context renderer
    session = _import(sqlite_store, wt.write_trace(tmp_path, trace, 1)).sessions[0]
    path = weave.chosen_path(sqlite_store, session)
    assert blocks.render_block(path[number]) == RENDERED[vintage, number]


def test_q_lines_are_the_only_difference_and_are_deterministic() -> None:
    action = wt.modern()[7]
    first = blocks.render_weave(action)
    assert blocks.render_weave(action) == first  # weave-agent would draw Yes or No anew
    expectation = blocks.render_weave(wt.modern()[8])  # an infinite score
    assert "#q: Is this expectation testable? Yes. (100.0%)\n" in expectation
    evaluation = blocks.render_weave(wt.modern()[10])  # NaN, as weave-agent: even odds
    assert "#q: Does this check the expectation? Yes. (50.0%)\n" in evaluation


def test_our_own_blocks_render_as_weave_agent_would_render_their_export(
    sqlite_store: TraceStore,
) -> None:
    session = build_session(sqlite_store, blocks=300, seed=3)
    path = weave.chosen_path(sqlite_store, session)
    exported = weave.weave_blocks(sqlite_store, session)
    assert len(path) == len(exported) > 100
    assert {b["type"] for b in exported} >= {
        "genesis",
        "task-reminder",
        "observation",
        "orientation",
        "action",
        "error",
        "debug",
        "expectation",
        "option",
        "evaluation",
        "outcome",
    }
    for node, block in zip(path, exported, strict=True):
        assert blocks.render_block(node) == blocks.render_weave(block)
        assert block["type"] == node.kind and block["index"] == node.meta["index"]
    # the context is every block's rendering, in order: weave-agent's rendered trace
    assert blocks.render_context(path) == "".join(blocks.render_weave(b) for b in exported)


# -- importing -----------------------------------------------------------------------------


def test_a_modern_trace_becomes_a_session_with_everything_kept(
    store: TraceStore, tmp_path: Path
) -> None:
    trace = wt.modern()
    report = _import(store, wt.write_trace(tmp_path, trace, 1737530012))
    (session_id,) = report.sessions
    session = store.get_session(session_id)
    assert session.status is SessionStatus.COMPLETED and session.backend == "weave-agent"
    assert session.task == "Write hello.txt with a greeting."
    path = weave.chosen_path(store, session_id)
    assert [n.kind for n in path] == [b["type"] for b in trace]
    assert [n.meta["index"] for n in path] == list(range(len(trace)))
    # ticks: counted at each orientation; the reminder and observations open the tick
    assert [n.tick for n in path] == [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    by_kind = {n.kind: n for n in path}
    action = by_kind["action"]
    assert action.text == wt.ACTION and action.author is Author.MODEL
    assert action.status is NodeStatus.EXECUTED and action.meta["title"] == "Write the greeting"
    assert action.score == 2.2 and action.score_parts == {"evaluator": 2.2}
    assert action.meta["q"] == "Is this action good?"
    assert by_kind["task-inference"].author is Author.MODEL
    assert by_kind["task-reminder"].author is Author.RUNTIME
    assert by_kind["error"].text.startswith("# Evaluation failed")
    # unknown kinds and fields stay, in the node's metadata, and come back out
    assert json.loads(by_kind["debate"].meta[blocks.WEAVE_META]["block"])["speaker"] == "A"
    assert blocks.to_weave(by_kind["debate"]) == trace[12]
    assert blocks.to_weave(by_kind["orientation"]) == trace[5]
    board = next(n for n in path if n.meta.get("title") == "Board")
    assert board.text == "{'x': 1, 'rows': [1, 2]}" and blocks.to_weave(board) == trace[4]
    # an infinite score is no number to rank by, but the block keeps it
    expectation = by_kind["expectation"]
    assert expectation.score is None and blocks.to_weave(expectation)["score"] == math.inf
    # the candidates weave-agent sampled are alternates under the same prompt
    (alternate,) = [n for n in store.children(action.parent_id) if n.id != action.id]
    assert alternate.status is NodeStatus.ALTERNATE and alternate.text == wt.ALTERNATE
    assert alternate.score == -1.0 and alternate.prompt_hash == action.prompt_hash
    assert alternate.prompt_hash is not None
    # outcomes: the block's own run, and each evaluation row of the outcome table
    (ran,) = store.evaluations(action.id)
    assert (ran.name, ran.passed, ran.result, ran.kind) == (
        weave.RUN_EVALUATION,
        True,
        True,
        EvaluationKind.CALLBACK,
    )
    table = {e.name: e for e in store.evaluations(by_kind["outcome"].id)}
    assert set(table) == {"hello.txt says hello", "greeting is polite", "word count"}
    assert table["hello.txt says hello"].passed is True
    assert table["greeting is polite"].passed is False and table["greeting is polite"].error
    assert table["word count"].passed is False and table["word count"].result == 0
    assert by_kind["outcome"].meta["passed"] == 1 and by_kind["outcome"].meta["total"] == 3


def test_a_legacy_trace_imports_and_exports_with_its_own_field_names(
    store: TraceStore, tmp_path: Path
) -> None:
    trace = wt.legacy()
    session_id = _import(store, wt.write_trace(tmp_path, trace, 1)).sessions[0]
    path = weave.chosen_path(store, session_id)
    texts = {n.kind: n.text for n in path}
    assert texts["genesis"] == "# the first bootstrap\n"
    assert texts["task-reminder"] == "Write hello.txt."
    assert texts["observation"] == "nothing yet"
    assert texts["action"] == wt.ACTION
    assert texts["error"].startswith("# Action execution failed")
    action = next(n for n in path if n.kind == "action")
    assert action.status is NodeStatus.FAILED
    (ran,) = store.evaluations(action.id)
    assert ran.passed is False and ran.error == "PermissionError"
    assert weave.weave_blocks(store, session_id) == trace
    # weave-agent's older traces have no scores on runtime blocks: nothing is invented
    assert "q" not in blocks.to_weave(path[1]) and path[1].score is None


def test_reimporting_adds_nothing_and_a_later_dump_adds_only_what_is_new(
    store: TraceStore, tmp_path: Path
) -> None:
    trace = wt.modern()
    # weave-agent dumps the whole stream each tick: an early dump, before the action ran
    early = [dict(b) for b in trace[:8]]
    del early[7]["outcome"]
    first = _import(store, wt.write_trace(tmp_path / "a", early, 100))
    session_id = first.sessions[0]
    assert first.files[0].added == 8
    count = store.count_nodes(session_id)  # with the action's alternate
    again = _import(store, tmp_path / "a")
    assert again.files[0].added == 0 and "already imported" in again.files[0].describe()
    assert store.count_nodes(session_id) == count
    action = next(n for n in weave.chosen_path(store, session_id) if n.kind == "action")
    assert action.status is NodeStatus.CHOSEN and store.evaluations(action.id) == []
    # the later dump: the action's outcome written in, and six more blocks
    later = _import(store, wt.write_trace(tmp_path / "b", trace, 200))
    assert later.sessions == [session_id]
    assert (later.files[0].added, later.files[0].updated) == (len(trace) - 8, 1)
    assert store.count_nodes(session_id) == count + len(trace) - 8
    action = store.get_node(action.id)
    assert action.status is NodeStatus.EXECUTED and len(store.evaluations(action.id)) == 1
    assert json.dumps(weave.weave_blocks(store, session_id)) == json.dumps(trace)


def test_a_folder_imports_in_the_order_weave_agent_wrote_it_and_bad_files_are_named(
    sqlite_store: TraceStore, tmp_path: Path
) -> None:
    folder = tmp_path / "weave-agent-logs"
    wt.write_trace(folder, wt.modern(), 1737530999)
    wt.write_trace(folder, wt.modern()[:4], 1737530100)  # an earlier dump of the same run
    wt.write_trace(folder / "old", wt.legacy(), 1)
    (folder / "event_trace_5.json").write_text('[{"type": "action"', encoding="utf-8")
    (folder / "notes.json").write_text(json.dumps({"hello": 1}), encoding="utf-8")
    (folder / "bad_block.json").write_text(json.dumps([{"body": "x"}]), encoding="utf-8")
    (folder / "no_body.json").write_text(json.dumps([{"type": "action"}]), encoding="utf-8")
    report = weave.import_paths(sqlite_store, [folder])
    errors = {Path(f.path).name: f.error for f in report.failed}
    assert errors == {
        "event_trace_5.json": "not JSON: Expecting ',' delimiter (line 1, column 19)",
        "notes.json": "expected a list of blocks (weave-agent's event_trace_*.json), got an object",
        "bad_block.json": 'block 0: no "type"',
        "no_body.json": 'block 0 (action): no "body" (nor "program")',
    }
    assert len(report.sessions) == 2  # the two dumps of one run are one session
    modern = max(report.sessions, key=sqlite_store.count_nodes)
    assert len(weave.chosen_path(sqlite_store, modern)) == len(wt.modern())
    assert report.describe().startswith("3 of 7 file(s) imported into 2 session(s)")


def test_shards_with_categories_import_labelled(sqlite_store: TraceStore, tmp_path: Path) -> None:
    shard = tmp_path / "train-00000.jsonl.gz"
    with gzip.open(shard, "wt", encoding="utf-8") as out:
        out.write(json.dumps({"trace": json.dumps(wt.modern()), "category": "good"}) + "\n")
        out.write(json.dumps({"trace": json.dumps(wt.legacy()), "category": "bad"}) + "\n")
    good, bad = _import(sqlite_store, shard).sessions
    for session_id, value in ((good, LabelValue.GOOD), (bad, LabelValue.BAD)):
        leaf = weave.chosen_path(sqlite_store, session_id)[-1]
        label = sqlite_store.label_of(leaf.id)
        assert label is not None and (label.value, label.scope) == (value, LabelScope.PATH)


# -- exporting -----------------------------------------------------------------------------


@pytest.mark.parametrize("alternates", [False, True], ids=["chosen-path", "with-alternates"])
def test_export_import_export_gives_identical_json(
    store: TraceStore, tmp_path: Path, alternates: bool
) -> None:
    session_id = build_session(store, blocks=200, seed=5)
    first = weave.export_session(store, session_id, tmp_path / "one", alternates=alternates)
    assert first.trace.name.startswith("event_trace_") and first.rendered.suffix == ".py"
    imported = _import(store, first.trace).sessions[0]
    assert imported != session_id
    second = weave.export_session(store, imported, tmp_path / "two", alternates=alternates)
    assert second.trace.read_text() == first.trace.read_text()
    assert second.rendered.read_text() == first.rendered.read_text()
    trace = json.loads(first.trace.read_text())
    has_candidates = any("candidates" in b for b in trace)
    assert has_candidates is alternates
    # what weave-agent has no field for travels in our own key, and comes back
    original, copy = weave.chosen_path(store, session_id), weave.chosen_path(store, imported)
    assert [(n.tick, n.kind, n.author, n.status, n.score) for n in copy] == [
        (n.tick, n.kind, n.author, n.status, n.score) for n in original
    ]
    if alternates:
        alternates_of = lambda sid: sum(  # noqa: E731
            1 for n in store.tree(sid) if n.status is NodeStatus.ALTERNATE
        )
        assert alternates_of(imported) == sum(len(b.get("candidates", [])) for b in trace) > 0
    # and a weave-agent trace goes out as it came in, NaN and Infinity included
    native = _import(store, wt.write_trace(tmp_path / "w", wt.modern(), 7)).sessions[0]
    out = weave.export_session(store, native, tmp_path / "three")
    assert out.trace.read_text() == json.dumps(wt.modern())


def test_the_rendered_trace_is_the_context(sqlite_store: TraceStore, tmp_path: Path) -> None:
    session_id = _import(sqlite_store, wt.write_trace(tmp_path, wt.modern(), 9)).sessions[0]
    done = weave.export_session(sqlite_store, session_id, tmp_path / "out")
    assert done.rendered.name == "rendered_trace_1737530012.py"
    path = weave.chosen_path(sqlite_store, session_id)
    assert done.rendered.read_text() == blocks.render_context(path)


# -- training from an imported trace -------------------------------------------------------


def test_a_labelled_imported_trace_gives_the_rows_the_rules_say(
    sqlite_store: TraceStore, tmp_path: Path
) -> None:
    store = sqlite_store
    session_id = _import(store, wt.write_trace(tmp_path, wt.modern(), 1)).sessions[0]
    path = weave.chosen_path(store, session_id)
    action = next(n for n in path if n.kind == "action")
    (alternate,) = [n for n in store.children(action.parent_id) if n.id != action.id]
    # the operator likes the path up to the action, and not the candidate weave-agent dropped
    store.add_label(action.id, LabelValue.GOOD, scope=LabelScope.PATH)
    store.add_label(alternate.id, LabelValue.BAD)
    report = BuildReport(DatasetKind.SFT)
    sft = list(iter_rows(store, "sft", session_ids=[session_id], report=report))
    assert report.mismatches == [] and report.unchecked == 0
    # SFT: the model-written blocks on the labelled path (the runtime's are context)
    assert [row["kind"] for row in sft] == ["orientation", "task-inference", "action"]
    by_kind = {row["kind"]: row for row in sft}
    prefix = "".join(blocks.render_block(n) for n in path[: path.index(action)])
    header = (
        "#subagent main\n#startblock type: action\n#index 7\n#timestamp 1737530006.1305623\n"
        "#time_remaining 21548.0 seconds\n#block_size I have 192 tokens (quarter) to write with\n\n"
    )
    assert by_kind["action"]["prompt"] == prefix + header
    assert by_kind["action"]["completion"] == wt.ACTION + "\n#endblock"
    assert by_kind["task-inference"]["completion"] == "# the task stands\n\n#endblock"
    # DPO: the good action over its bad sibling, on the same prompt
    report = BuildReport(DatasetKind.DPO)
    (pair,) = list(iter_rows(store, "dpo", session_ids=[session_id], report=report))
    assert report.mismatches == []
    assert pair["prompt"] == prefix + header
    assert pair["chosen"] == wt.ACTION + "\n#endblock"
    assert pair["rejected"] == wt.ALTERNATE + "\n#endblock"


def test_long_imported_traces_collapse_old_ticks_in_their_prompts(
    sqlite_store: TraceStore, tmp_path: Path
) -> None:
    session = build_session(sqlite_store, blocks=400, seed=1)
    trace = weave.export_session(sqlite_store, session, tmp_path / "x").trace
    report = weave.import_paths(sqlite_store, [trace], context_tokens=2000)
    imported = report.sessions[0]
    path = weave.chosen_path(sqlite_store, imported)
    last = next(n for n in reversed(path) if n.author is Author.MODEL)
    assert last.meta["collapsed"] and 0 not in last.meta["collapsed"]
    prompt = blocks.block_prompt(path[: path.index(last)], last)
    assert len(prompt) < 2000 * 3 + 2000 and "(collapsed)" in prompt
    assert blocks.prompt_hash(prompt) == last.prompt_hash
    rows = BuildReport(DatasetKind.SFT)
    sqlite_store.add_label(path[-1].id, LabelValue.GOOD, scope=LabelScope.PATH)
    list(iter_rows(sqlite_store, "sft", session_ids=[imported], report=rows))
    assert rows.rows > 0 and rows.mismatches == []
