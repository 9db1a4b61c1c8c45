"""Malformed model and tool output, through the real runtime and into the store: a block
that never ends, a 1 MB block, invalid UTF-8 from tools, code that prints 100 MB. Each is
handled (the session goes on and ends cleanly), capped where it would flood something,
and recorded.

Everything is real: the tests' random-init tiny Qwen2 in process, the bubblewrap sandbox
kernel, a SQLite file, the console under Pilot, the `agent-console` executable. Operator
decisions are fed through the runtime's approval gate (`agents.approval.Answer`), as
the console's modal does.

1. A block that never ends: the tiny model never writes `#endblock`, so with a 12-token
   block limit its blocks hit it. Such a block is closed, stored `truncated` with
   `finish_reason` "length", and the session goes on: the next block's prompt renders
   it closed with `#endblock`, every block of that prompt is opened and closed in turn,
   and the prompt re-renders to the hash stored with that next block.
2. A 1 MB block: the operator's edit of an action into ~1 MB of Python. Decided here:
   the store keeps it WHOLE (it is what runs, and the operator's work is never lost nor
   altered: "edits never overwrite", docs/architecture.md, "Data model"); the context
   shows it capped to `OPERATOR_CONTEXT_CHARS` (head, marker, tail), a cap stored in the
   node's meta so that training re-renders the same bytes. So the next prompt fits the
   model, the sandbox runs all of it, SFT/DPO rows are built with the whole edit as the
   completion, and the console's block view shows the first `VIEW_CHARS` characters and
   says so.
   (Before the fix the edit's score prompt overflowed the model: the session failed with
   a backend error and the operator's edit was not stored at all.)
3. Invalid UTF-8 from tools (fd 1, a child process's stdout and stderr, a binary file, a
   file name that is not UTF-8): stored as valid text with U+FFFD replacement characters
   (the name's byte becomes "?"), the session goes on, and `agent-console export weave`
   writes the session.
4. Code that prints 100 MB (through `print` and a child process): the kernel keeps
   `Limits.output_bytes` (64 KiB) of each stream and counts the rest ("[... 99.9 MB
   dropped]"); the outcome block clips that to `RUNTIME_TEXT_CHARS` (4,000) characters
   with its own marker; the kernel lives on (a task check reads a global the action set
   before the flood); the SQLite file stays a few hundred kB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents import blocks
from agents.approval import Answer
from agents.runtime import OPERATOR_CONTEXT_CHARS, RUNTIME_TEXT_CHARS, Outcome
from agents.sandbox import Limits
from agents.tasks import Task
from storage import Author, Node, NodeStatus, SessionStatus, TraceStore, Verdict
from tests.support.answer_task import SOLVE, TASK
from tests.support.runs import make_runtime

pytestmark = [pytest.mark.cli, pytest.mark.timeout(300)]

AGENT_CONSOLE = Path(sys.executable).with_name("agent-console")
#: One candidate per block, no escalation: every test here is about one block.
FAST = {"candidates": 1, "escalation": (), "block_tokens": 12, "max_ticks": 1}

DATA_CHARS = 1_000_000
#: ~1 MB of Python: a string literal, written to a file, and the answer the task checks.
MEGABYTE = (
    f'DATA = "{"abcdefghij" * (DATA_CHARS // 10)}"\n'
    "def write_data(subagent):\n"
    '    subagent.write_file("big.txt", DATA)\n'
    '    subagent.write_file("answer.txt", "42\\n")\n'
    "    return len(DATA)\n"
    'self.add_action("Write a megabyte", write_data)\n'
)

BAD_BYTES = r"""import os, sys
def bad_bytes(subagent):
    os.write(1, b"fd1 \xff\xfe\x80 end\n")
    child = subagent.run([sys.executable, "-c",
        "import sys; sys.stdout.buffer.write(b'child \\xff\\xfe out');"
        "sys.stderr.buffer.write(b'child \\xc3\\x28 err')"])
    with open(os.path.join(subagent.workdir, "blob.bin"), "wb") as handle:
        handle.write(b"\xff\xfe\x80 binary \xed\xa0\x80 encoded surrogate")
    name = os.path.join(os.fsencode(subagent.workdir), b"name-\xff.txt")
    with open(name, "wb") as handle:
        handle.write(b"x")
    return {"child": child["stdout"], "err": child["stderr"],
            "file": subagent.read_file("blob.bin"), "names": subagent.list_files(".")}
self.add_action("Emit bad bytes", bad_bytes)
"""

FLOOD = r"""import sys
MARK = "set before the flood"
def flood(subagent):
    line = "y" * 1023
    for _ in range(100 * 1024):
        print(line)
    child = subagent.run("head -c 100000000 /dev/zero | tr '\\0' z")
    subagent.write_file("after.txt", MARK)
    return {"child_stdout_chars": len(child["stdout"])}
self.add_action("Print 100 MB", flood)
"""

FLOOD_TASK = Task(
    name="flood",
    title="Survive the flood",
    prompt="Print a lot, then carry on.",
    files={},
    checks="""
def kernel_carried_on(subagent):
    return subagent.read_file("after.txt") == "set before the flood"
self.add_evaluation("kernel_carried_on", kernel_carried_on)
""",
    check_names=("kernel_carried_on",),
    source="test",
)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def edited_action(store: TraceStore, session_id: int) -> Node:
    (edit,) = [n for n in store.tree(session_id) if n.author is Author.OPERATOR]
    return store.get_node(edit.id)


def next_on_path(store: TraceStore, node: Node) -> Node:
    """The block the session wrote right after `node` (on the chosen path)."""
    last = [n for n in store.tree(node.session_id) if n.kind == blocks.OUTCOME][-1]
    path = store.path(last.id)
    at = [n.id for n in path].index(node.id)
    return path[at + 1]


def assert_well_formed(prompt: str) -> None:
    """Every block of `prompt` is closed before the next opens; the prompt ends inside
    the one block the model is about to write (its forced header)."""
    open_block = False
    for line in prompt.split("\n"):
        if line.startswith("#startblock"):
            assert not open_block, f"a block opened before the last closed: {line!r}"
            open_block = True
        elif line.startswith("#endblock"):
            assert open_block, "#endblock without a block"
            open_block = False
    assert open_block, "the prompt does not end in the next block's header"


# -- 1. a block that never ends --------------------------------------------------------------


def test_a_block_that_never_ends_is_closed_marked_truncated_and_the_session_goes_on(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    runtime, _ = make_runtime(
        sqlite_store, backend, tmp_path, [lambda r: Answer.edit(SOLVE)], **FAST
    )
    outcome = runtime.run()
    assert outcome.status is SessionStatus.COMPLETED, outcome
    store = sqlite_store
    model = [store.get_node(n.id) for n in store.tree(outcome.session_id)]
    model = [n for n in model if n.author is Author.MODEL]
    cut = [n for n in model if n.truncated]
    assert cut, "the tiny model ended every block by itself"
    for node in cut:
        assert node.sampling["finish_reason"] == "length"
        assert node.sampling["max_tokens"] == 12 and len(node.token_ids or ()) == 12
        assert blocks.to_weave(node)[blocks.EXTENSION_KEY]["truncated"] is True
    # a truncated block that won goes on the path, and the session wrote on after it
    (done,) = [n for n in store.tree(outcome.session_id) if n.kind == blocks.OUTCOME]
    on_path = {n.id for n in store.path(done.id)}
    first = next(n for n in cut if n.id in on_path)
    after = next_on_path(store, first)
    assert after.tick == first.tick and after.id > first.id
    assert after.prompt_hash is not None
    prompt = blocks.block_prompt(store.path(after.parent_id or 0), after)
    assert blocks.prompt_hash(prompt) == after.prompt_hash
    rendered = blocks.render_block(first)
    assert rendered.endswith("\n#endblock\n") and first.text.rstrip() in rendered
    assert rendered + "#startblock" in prompt  # closed, then the next block starts
    assert_well_formed(prompt)
    # the session ran to the end of its tick, and ended cleanly
    assert [n.kind for n in store.path(done.id)][:2] == [blocks.GENESIS, blocks.TASK_REMINDER]
    assert store.get_session(outcome.session_id).status is SessionStatus.COMPLETED


# -- 2. a 1 MB block --------------------------------------------------------------------------


@dataclass
class Megabyte:
    db: Path
    workdir: Path
    outcome: Outcome
    original: Node
    edit: Node


@pytest.fixture(scope="module")
def megabyte(tmp_path_factory: pytest.TempPathFactory, backend: object) -> Megabyte:
    """One session whose first action the operator edits into MEGABYTE."""
    tmp = tmp_path_factory.mktemp("megabyte")
    with TraceStore(tmp / "traces.db") as store:
        runtime, asked = make_runtime(
            store, backend, tmp, [lambda r: Answer.edit(MEGABYTE)], task=TASK, **FAST
        )
        outcome = runtime.run()
        return Megabyte(
            tmp / "traces.db",
            runtime.workdir,
            outcome,
            store.get_node(asked[0].action.id),
            edited_action(store, outcome.session_id),
        )


def test_a_megabyte_edit_is_stored_whole_and_the_sandbox_runs_all_of_it(
    megabyte: Megabyte,
) -> None:
    assert megabyte.outcome.status is SessionStatus.COMPLETED, megabyte.outcome
    edit = megabyte.edit
    assert edit.text == MEGABYTE and len(edit.text) > DATA_CHARS
    assert edit.edited_from_id == megabyte.original.id
    assert edit.status is NodeStatus.EXECUTED
    assert edit.meta["result"] == DATA_CHARS
    assert edit.meta["title"] == "Write a megabyte"
    assert edit.meta[blocks.CONTEXT_CHARS_META] == OPERATOR_CONTEXT_CHARS
    assert "evaluator" in edit.score_parts
    assert (megabyte.workdir / "big.txt").stat().st_size == DATA_CHARS
    with TraceStore(megabyte.db) as store:
        (decision,) = store.decisions(megabyte.original.id)
        assert decision.verdict is Verdict.EDIT and decision.result_node_id == edit.id
        assert store.get_node(megabyte.original.id).status is NodeStatus.EDITED


def test_the_prompt_after_a_megabyte_block_shows_it_capped_and_fits_the_model(
    megabyte: Megabyte, backend: object
) -> None:
    with TraceStore(megabyte.db) as store:
        after = next_on_path(store, megabyte.edit)
        assert after.kind == blocks.EXPECTATION and after.author is Author.MODEL
        prompt = blocks.block_prompt(store.path(after.parent_id or 0), after)
    assert blocks.prompt_hash(prompt) == after.prompt_hash  # training renders the same bytes
    assert_well_formed(prompt)
    cut = len(MEGABYTE.rstrip()) - OPERATOR_CONTEXT_CHARS  # the body as stored, unpadded
    assert f"# [... {cut} characters cut ...]" in prompt
    assert 'self.add_action("Write a megabyte", write_data)' in prompt  # the tail is kept
    assert len(prompt) < 3 * OPERATOR_CONTEXT_CHARS
    tokens = len(backend.tokenize(prompt))  # type: ignore[attr-defined]
    assert tokens + 12 <= backend.context_length  # type: ignore[attr-defined]


def test_sft_and_dpo_rows_carry_the_whole_megabyte_edit(megabyte: Megabyte) -> None:
    from training.datasets import BuildReport, DatasetKind, iter_rows

    with TraceStore(megabyte.db) as store:
        sft_report = BuildReport(DatasetKind.SFT)
        sft = list(iter_rows(store, "sft", report=sft_report))
        dpo_report = BuildReport(DatasetKind.DPO)
        dpo = list(iter_rows(store, "dpo", report=dpo_report))
    assert not sft_report.mismatches and not dpo_report.mismatches
    (row,) = [r for r in sft if r["node_id"] == megabyte.edit.id]
    assert row["completion"] == MEGABYTE.rstrip("\n") + "\n#endblock"
    assert len(row["prompt"]) < 3 * OPERATOR_CONTEXT_CHARS
    (pair,) = [p for p in dpo if p["chosen_id"] == megabyte.edit.id]
    assert pair["rejected_id"] == megabyte.original.id and len(pair["chosen"]) > DATA_CHARS
    json.dumps(row).encode("utf-8")  # a JSONL line as export writes it


@pytest.fixture
def quiet_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No user config, data or AGENT_CONSOLE_* variable reaches the console."""
    for name in list(os.environ):
        if name.startswith("AGENT_CONSOLE_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


async def test_the_console_shows_a_megabyte_block_capped(
    megabyte: Megabyte, quiet_env: None
) -> None:
    from agents.settings import Settings
    from app.console import ConsoleApp
    from app.widgets.block_view import VIEW_CHARS
    from tests.app.test_console import SIZE, expand_first_session, select, settle, shown
    from tests.app.test_main_screen import open_tick

    with TraceStore(megabyte.db) as store:
        app = ConsoleApp(store=store, settings=Settings(backend="none"))
        async with app.run_test(size=SIZE) as pilot:
            await expand_first_session(app, pilot)
            await open_tick(app, pilot, megabyte.outcome.session_id, 1)
            await select(app, pilot, megabyte.edit)
            await settle(app, pilot)
            text = shown(app)
    assert f"#{megabyte.edit.id} action" in text
    assert f"[shown: the first {VIEW_CHARS:,} of {len(MEGABYTE):,} characters]" in text
    assert len(text) < 3 * VIEW_CHARS


# -- 3. invalid UTF-8 in tool output ----------------------------------------------------------


def test_invalid_utf8_from_tools_is_stored_replaced_and_the_session_exports(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    runtime, _ = make_runtime(
        sqlite_store, backend, tmp_path, [lambda r: Answer.edit(BAD_BYTES)], **FAST
    )
    outcome = runtime.run()
    store = sqlite_store
    assert outcome.status is SessionStatus.TRUNCATED and outcome.reason == "tick limit (1) reached"
    edit = edited_action(store, outcome.session_id)
    assert edit.status is NodeStatus.EXECUTED, edit.meta
    assert edit.meta["stdout"] == "fd1 \ufffd\ufffd\ufffd end\n"
    result = edit.meta["result"]
    assert result["child"] == "child \ufffd\ufffd out"
    assert result["err"] == "child \ufffd( err"
    assert result["file"] == "\ufffd\ufffd\ufffd binary \ufffd\ufffd\ufffd encoded surrogate"
    assert "name-?.txt" in result["names"]  # the name's byte could not be UTF-8: "?"
    # the outcome block tells the same, as valid text, and the tick went on to its end
    (done,) = [n for n in store.tree(outcome.session_id) if n.kind == blocks.OUTCOME]
    assert "child \ufffd\ufffd out" in done.text and "fd1 \ufffd\ufffd\ufffd end" in done.text
    for node in store.tree(outcome.session_id):
        node.text.encode("utf-8")  # no lone surrogate reached the store
        json.dumps(store.get_node(node.id).meta, ensure_ascii=False).encode("utf-8")
    assert [n.kind for n in store.path(done.id)][-1] == blocks.OUTCOME

    out = tmp_path / "export"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_CONSOLE_")}
    env.update(XDG_CONFIG_HOME=str(tmp_path / "config"), XDG_DATA_HOME=str(tmp_path / "data"))
    argv = [str(AGENT_CONSOLE), "--db", str(tmp_path / "traces.db"), "export", "weave"]
    done_cli = subprocess.run(
        [*argv, str(outcome.session_id), "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done_cli.returncode == 0, done_cli.stderr
    (trace_file,) = out.glob("event_trace_*.json")
    (rendered_file,) = out.glob("rendered_trace_*.py")
    trace = json.loads(trace_file.read_text(encoding="utf-8"))
    exported = next(b for b in trace if b.get("body") == BAD_BYTES.rstrip("\n"))
    assert exported["outcome"]["result"]["child"] == "child \ufffd\ufffd out"
    assert "child \ufffd\ufffd out" in rendered_file.read_bytes().decode("utf-8")


# -- 4. code that prints 100 MB ---------------------------------------------------------------


def test_printing_100_mb_is_capped_recorded_and_the_kernel_lives_on(
    sqlite_store: TraceStore, backend: object, tmp_path: Path
) -> None:
    cap = Limits().output_bytes
    assert cap == 64 << 10
    runtime, _ = make_runtime(
        sqlite_store,
        backend,
        tmp_path,
        [lambda r: Answer.edit(FLOOD)],
        task=FLOOD_TASK,
        action_timeout=30.0,
        **FAST,
    )
    outcome = runtime.run()
    store = sqlite_store
    # the kernel that ran the flood carried on after it, its state whole: the action wrote
    # what it set before the flood, and the task's check read it
    assert outcome.status is SessionStatus.COMPLETED, outcome
    edit = edited_action(store, outcome.session_id)
    assert edit.status is NodeStatus.EXECUTED, edit.meta
    stdout = edit.meta["stdout"]
    assert stdout.startswith("y" * 1023 + "\n")
    assert stdout.endswith("[... 104.8 MB dropped]")  # 100 MiB printed, 64 KiB kept
    assert len(stdout.encode("utf-8")) <= cap + 64
    assert cap <= edit.meta["result"]["child_stdout_chars"] <= cap + 64
    (done,) = [n for n in store.tree(outcome.session_id) if n.kind == blocks.OUTCOME]
    assert len(done.text) < RUNTIME_TEXT_CHARS + 300
    assert "characters cut ...]" in done.text and "MB dropped]" in done.text
    check = next(e for e in store.evaluations(done.id) if e.name == "kernel_carried_on")
    assert check.passed is True
    # nothing near 100 MB was written: the largest row is the kept output
    db = tmp_path / "traces.db"
    size = sum(p.stat().st_size for p in db.parent.glob("traces.db*"))
    assert size < 2_000_000, f"the store grew to {size} bytes"
    biggest = max(
        len(n.text) + len(json.dumps(store.get_node(n.id).meta))
        for n in store.tree(outcome.session_id)
    )
    assert biggest < 4 * cap
