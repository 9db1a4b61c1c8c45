"""A session imported from a weave-agent trace, in the console, driven by Pilot against a
real SQLite store: it is browsed like our own (weave-only kinds and a kind nobody knows
included), its blocks shown, and its action labelled from the tree and the label queue
into training data."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Static

from agents.settings import Settings
from agents.weave import import_paths
from app.console import ConsoleApp
from app.screens.label import LabelScreen
from app.screens.main import MainScreen
from app.widgets.block_view import Candidates
from storage import LabelScope, LabelValue, Node, NodeStatus, TraceStore
from tests.app.test_console import (
    SIZE,
    Notes,
    inspected,
    move_to,
    plain,
    select,
    settle,
    shown,
    tick_node,
    tree_node,
    visible,
)
from tests.support.pilot import plain as static_text

ACTION = (
    "def write(subagent):\n"
    "    open('hello.txt','w').write('hi')\n"
    "    return True\n"
    "\n"
    "self.add_action('Write the file', write)"
)
OTHER = "def other(subagent):\n    return False\n\nself.add_action('Other', other)"

#: A weave-agent trace with its own kinds (bootstrap, task-inference) and one that neither
#: agent knows (debate), besides the usual ones.
TRACE: list[dict[str, Any]] = [
    {"type": "bootstrap", "body": "import os\nagent.add_orientation({'program': 'x'})",
     "index": 0, "timestamp": 1737530000.0},
    {"type": "genesis", "body": "# the bootstrap\nprint('hi')", "index": 1,
     "timestamp": 1737530000.5, "q": "", "score": 2},
    {"type": "task-reminder", "body": "Write hello.txt", "index": 2, "timestamp": 1737530001.25,
     "q": "", "score": 2},
    {"type": "task-inference", "body": "self.current_task.going('writing the file')",
     "index": 3, "timestamp": 1737530001.5, "q": "Is this task inference good?", "score": 1.0},
    {"type": "observation", "title": "Files", "body": "hello.txt missing", "index": 4,
     "timestamp": 1737530002.0, "q": "", "score": 2},
    {"type": "orientation", "body": "I should write the file.", "index": 5,
     "timestamp": 1737530003.0, "q": "Is this orientation good?", "score": 1.5},
    {"type": "debate", "body": "Alice: write it.\nBob: agreed.", "index": 6,
     "timestamp": 1737530003.5},
    {"type": "action", "body": ACTION, "index": 7, "timestamp": 1737530004.0,
     "q": "Is this action good?", "score": 2.2,
     "outcome": {"id": 7, "error": None, "result": True}, "candidates": [[OTHER, -1.0]]},
    {"type": "outcome", "index": 8, "timestamp": 1737530005.0,
     "table": [["Write the file", True], ["hello.txt exists", True], ["greeting right", "ERROR"]],
     "q": "", "score": 2},
]  # fmt: skip


@dataclass
class Imported:
    session_id: int
    #: the chosen blocks by kind (each kind is there once)
    blocks: dict[str, Node]
    alternate: Node


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


@pytest.fixture
def imported(store: TraceStore, tmp_path: Path) -> Imported:
    path = tmp_path / "event_trace_1737530005.json"
    path.write_text(json.dumps(TRACE), encoding="utf-8")
    report = import_paths(store, [path])
    assert not report.failed and len(report.sessions) == 1
    (session_id,) = report.sessions
    nodes = store.tree(session_id)
    chosen = {n.kind: n for n in nodes if n.status is not NodeStatus.ALTERNATE}
    assert list(chosen) == [block["type"] for block in TRACE]
    (alternate,) = [n for n in nodes if n.status is NodeStatus.ALTERNATE]
    return Imported(session_id, chosen, alternate)


def console_app(store: TraceStore) -> ConsoleApp:
    return ConsoleApp(store=store, settings=Settings(backend="none"))


async def test_an_imported_session_is_browsed_like_our_own(
    store: TraceStore, imported: Imported
) -> None:
    app = console_app(store)
    notes = Notes()
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
        sid = imported.session_id
        assert visible(app) == [f"#{sid} weave-agent event_trace_1737530005.json  completed"]
        await pilot.press("space")
        await settle(app, pilot)
        await move_to(app, pilot, tick_node(app, sid, 0).line)
        await pilot.press("space")
        await settle(app, pilot)
        lines = [line.strip() for line in visible(app)]
        for kind, first_line in (
            ("bootstrap", "import os"),
            ("genesis", "# the bootstrap"),
            ("task-reminder", "Write hello.txt"),
            ("task-inference", "self.current_task.going('writing the file')"),
            ("observation", "hello.txt missing"),
            ("orientation", "I should write the file."),
            ("debate", "Alice: write it."),
            ("action", "def write(subagent):"),
            ("outcome", "Evaluation Results:"),
        ):
            line = next((line for line in lines if line.split(" ")[0] == kind), None)
            assert line is not None, f"no {kind} line in {lines}"
            assert line.endswith(first_line), line
        # the weave-agent blocks before the first orientation are tick 0; the rest tick 1
        assert lines[1].startswith("tick 0") and lines[1].endswith("4 blocks")
        assert lines[6].startswith("tick 1") and lines[6].endswith("6 blocks")

        # every block, whatever its kind, shows in the block view with its header and text
        for kind, node in imported.blocks.items():
            await select(app, pilot, node)
            head, *rest = shown(app).splitlines()
            assert head.startswith(f"#{node.id} {kind} · tick {node.tick} · "), head
            assert node.text.splitlines()[0] in "\n".join(rest)
        await select(app, pilot, imported.blocks["task-inference"])
        assert shown(app).splitlines()[:2] == [
            f"#{imported.blocks['task-inference'].id} task-inference · tick 0 · chosen · by model",
            "score +1.00   evaluator +1.00",
        ]
        await select(app, pilot, imported.blocks["debate"])
        assert shown(app).splitlines()[0].endswith("debate · tick 1 · chosen · by runtime")

        # the action: its header, score and code; the tick's evaluations and questions
        action = imported.blocks["action"]
        await select(app, pilot, action)
        assert [line.rstrip() for line in shown(app).splitlines()] == [
            f"#{action.id} action · tick 1 · executed · by model",
            "score +2.20   evaluator +2.20",
            "",
            *ACTION.splitlines(),
        ]
        tick = inspected(app)
        assert "pass  hello.txt exists    true" in tick
        assert "error greeting right      raised an exception" in tick
        assert "+2.20 action: Is this action good?" in tick
        assert "Files: hello.txt missing" in tick
        candidates = plain(app.query_one(Candidates).content)
        assert "2 candidates" in candidates and "def other(subagent):" in candidates
        # weave-agent's candidate folds under the action that beat it
        await pilot.press("space")
        await settle(app, pilot)
        assert tree_node(app, action).is_expanded
        assert tree_node(app, imported.alternate).parent is tree_node(app, action)

        await select(app, pilot, action)
        await pilot.press("g")
        await settle(app, pilot)
        label = store.label_of(action.id)
        assert label is not None
        assert (label.value, label.scope) == (LabelValue.GOOD, LabelScope.BLOCK)
        assert str(tree_node(app, action).label).startswith("+ action")
        assert shown(app).splitlines()[0].endswith("labelled good")
        assert "+1 -0" in str(tick_node(app, sid, 1).label)
    assert notes.of("error") == []


async def test_the_label_queue_turns_an_imported_action_into_training_data(
    store: TraceStore, imported: Imported
) -> None:
    app = console_app(store)
    notes = Notes()
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        await pilot.press("l")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, LabelScreen)
        action = imported.blocks["action"]
        # newest first: weave-agent's candidate (added after its action), then the action
        assert [item.node.id for item in screen.items] == [imported.alternate.id, action.id]
        head = static_text(screen.query_one("#label-head", Static))
        assert "weave-agent event_trace_1737530005.json" in head
        assert f"action #{imported.alternate.id}" in head and "alternate" in head
        evaluations = static_text(screen.query_one("#label-evaluations", Static))
        assert "hello.txt exists" in evaluations and "greeting right" in evaluations

        await pilot.press("b")  # the candidate weave-agent did not pick: bad
        await settle(app, pilot)
        assert screen.current is not None and screen.current.node.id == action.id
        await pilot.press("g")  # the action it ran: good
        await settle(app, pilot)
        good, bad = store.label_of(action.id), store.label_of(imported.alternate.id)
        assert good is not None and good.value is LabelValue.GOOD
        assert bad is not None and bad.value is LabelValue.BAD
        # the imported prompts check out: one SFT example and one DPO pair
        counters = static_text(screen.query_one("#label-counters", Static))
        assert "labelled 2  ·  left 0  ·  SFT examples 1  ·  DPO pairs 1" in counters
    assert notes.of("error") == []
