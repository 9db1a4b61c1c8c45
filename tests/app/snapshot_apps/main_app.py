"""The main screen over a deterministic store, for the snapshot test.

`build_main_trace` is shared with the Pilot tests in tests/app/test_main_screen.py, so
both look at the same trace: a session of four ticks (an observation; a scored action
with two alternates, its expectation and evaluation results of every kind; an action the
operator edited; a rejected action and a retry that raised), and an older session with
no blocks.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from agents.settings import Settings
from app import console
from storage import (
    Author,
    EvaluationKind,
    NewNode,
    Node,
    NodeStatus,
    Session,
    SessionStatus,
    TraceStore,
)

ACTION_TEXT = '''def action_read_config(subagent):
    """Read the settings file the failing test loads."""
    with open("settings.toml") as infile:
        return infile.read()

self.add_action("Read the settings file", action_read_config)'''
FIRST_ALTERNATE = 'def action_list_files(subagent):\n    import os\n    return os.listdir(".")'
SECOND_ALTERNATE = 'def action_run_tests(subagent):\n    return run("pytest -x")'
EXPECTATION_TEXT = (
    "The action succeeds if it returns the text of settings.toml with a [database] "
    "section; it fails if the file is missing."
)
ACTION_QUESTION = "Will this action make progress on the task?"
LOGIT_QUESTION = "Did the action succeed?"
SLOW_TEXT = 'def action_run_suite(subagent):\n    return run("pytest", timeout=20)'
EDITED_TEXT = 'def action_run_suite(subagent):\n    return run("pytest", timeout=60)'
REJECTED_TEXT = 'def action_reset(subagent):\n    return run("git checkout .")'
RETRY_TEXT = 'def action_patch(subagent):\n    return patch("settings.toml")'


@dataclass(frozen=True)
class MainTrace:
    """The stored blocks the tests select and assert on."""

    session: Session
    empty: Session
    observation: Node
    orientation: Node
    action: Node
    first_alternate: Node
    second_alternate: Node
    expectation: Node
    output: Node
    slow: Node
    edit: Node
    rejected: Node
    feedback: Node
    retry: Node


def build_main_trace(store: TraceStore) -> MainTrace:
    """Store the two sessions; the one with blocks is created last, so it is listed first."""
    empty = store.create_session("nothing happened yet", title="an empty session")
    session = store.create_session(
        "Fix the failing config test",
        title="fix the config test",
        backend="openai",
        model="tiny",
        status=SessionStatus.COMPLETED,
    )
    (observation,) = store.add_nodes(
        session.id,
        [
            NewNode(
                "observation",
                "tests/test_config.py::test_load FAILED",
                tick=0,
                author=Author.RUNTIME,
                status=NodeStatus.CHOSEN,
                meta={"title": "Test output"},
            )
        ],
    )
    orientation, action, first_alt, second_alt, expectation, output = store.add_nodes(
        session.id,
        [
            NewNode("orientation", "The test loads settings.toml: read it first.", tick=1,
                    parent_id=observation.id, status=NodeStatus.CHOSEN),
            NewNode("action", ACTION_TEXT, tick=1, parent_index=0, status=NodeStatus.EXECUTED,
                    score=0.42, score_parts={"evaluator": 0.30, "length": 0.12},
                    meta={"q": ACTION_QUESTION}),
            NewNode("action", FIRST_ALTERNATE, tick=1, parent_index=0,
                    status=NodeStatus.ALTERNATE, score=0.31, score_parts={"evaluator": 0.31}),
            NewNode("action", SECOND_ALTERNATE, tick=1, parent_index=0,
                    status=NodeStatus.ALTERNATE, score=-0.18,
                    score_parts={"evaluator": -0.18}),
            NewNode("expectation", EXPECTATION_TEXT, tick=1, parent_index=1,
                    status=NodeStatus.CHOSEN),
            NewNode("observation", "[database]\nurl = 'sqlite://'", tick=1, parent_index=4,
                    author=Author.RUNTIME, status=NodeStatus.CHOSEN,
                    meta={"title": "settings.toml"}),
        ],
    )  # fmt: skip
    store.record_evaluation(
        action.id, "database section exists", result=True, passed=True, duration=0.012
    )
    store.record_evaluation(
        action.id, "url points at postgres", result={"url": "sqlite://"}, passed=False,
        duration=0.25,
    )  # fmt: skip
    store.record_evaluation(
        action.id, "port is a number", passed=False, error="KeyError: 'port'", duration=None
    )
    store.record_evaluation(
        action.id, LOGIT_QUESTION, kind=EvaluationKind.LOGIT, result=1.25, passed=True
    )
    store.record_evaluation(
        output.id, "settings.toml", kind=EvaluationKind.OBSERVATION, result={"lines": 2}
    )
    (slow,) = store.add_nodes(
        session.id,
        [NewNode("action", SLOW_TEXT, tick=2, parent_id=output.id, status=NodeStatus.EDITED)],
    )
    (edit,) = store.add_nodes(
        session.id,
        [NewNode("action", EDITED_TEXT, tick=2, parent_id=output.id, author=Author.OPERATOR,
                 status=NodeStatus.EXECUTED, edited_from_id=slow.id)],
    )  # fmt: skip
    rejected, feedback, retry = store.add_nodes(
        session.id,
        [
            NewNode("action", REJECTED_TEXT, tick=3, parent_id=edit.id,
                    status=NodeStatus.REJECTED),
            NewNode("observation", "The operator rejected the action: keep my changes.",
                    tick=3, parent_index=0, author=Author.RUNTIME, status=NodeStatus.CHOSEN,
                    meta={"title": "Operator feedback"}),
            NewNode("action", RETRY_TEXT, tick=3, parent_index=1, status=NodeStatus.FAILED),
        ],
    )  # fmt: skip
    return MainTrace(
        session=store.get_session(session.id),
        empty=empty,
        observation=observation,
        orientation=orientation,
        action=action,
        first_alternate=first_alt,
        second_alternate=second_alt,
        expectation=expectation,
        output=output,
        slow=slow,
        edit=edit,
        rejected=rejected,
        feedback=feedback,
        retry=retry,
    )


class MainSnapshotApp(console.ConsoleApp):
    """The console over the deterministic store, with no model (the status bar says so).

    The snapshot plugin finds this class (the file's only App) and instantiates it; the
    store lives in a temporary folder named nowhere on screen."""

    # The plugin resolves a relative CSS_PATH against this file, not app/console.py.
    CSS_PATH = str(Path(console.__file__).parent / "screens" / "main.tcss")

    def __init__(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        store = TraceStore(Path(self.folder.name) / "t.db")
        self.trace = build_main_trace(store)
        super().__init__(store=store, settings=Settings(backend="none"))
        self.sub_title = "snapshot store"

    def on_unmount(self) -> None:
        self.store.close()
        self.folder.cleanup()
