"""The approval modal over a deterministic store, for the snapshot tests.

`build_approval_request` is shared with the Pilot tests in tests/app/test_approval.py, so
both look at the same trace: an observation, a scored action with its expectation, and two
alternate actions beside it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from textual.app import App
from textual.widgets import Input, TextArea

from agents.approval import Answer, ApprovalRequest
from app.screens.approval import ApprovalScreen
from storage import NewNode, NodeStatus, TraceStore

ACTION_TEXT = '''def action_read_config(subagent):
    """Read the settings file the failing test loads."""
    with open("settings.toml") as infile:
        return infile.read()

self.add_action("Read the settings file", action_read_config)
'''
EXPECTATION_TEXT = (
    "The action succeeds if it returns the text of settings.toml, which should have a "
    "[database] section; it fails if the file is missing."
)
FIRST_ALTERNATE = 'def action_list_files(subagent):\n    import os\n    return os.listdir(".")\n'
SECOND_ALTERNATE = (
    'def action_run_tests(subagent):\n    return subagent.tools["shell"].run("pytest -x")\n'
)


def build_approval_request(store: TraceStore, *, alternates: bool = True) -> ApprovalRequest:
    """Store a session whose action (with two alternates, unless told) awaits approval."""
    session = store.create_session("fix the failing test", title="approval")
    observation, action, expectation = store.add_nodes(
        session.id,
        [
            NewNode("observation", "tests/test_config.py::test_load FAILED", tick=3),
            NewNode(
                "action",
                ACTION_TEXT,
                tick=3,
                parent_index=0,
                score=0.42,
                score_parts={"logit": 0.30, "length": 0.12},
            ),
            NewNode("expectation", EXPECTATION_TEXT, tick=3, parent_index=1),
        ],
    )
    siblings = []
    if alternates:
        siblings = store.add_nodes(
            session.id,
            [
                NewNode("action", text, tick=3, parent_id=observation.id,
                        status=NodeStatus.ALTERNATE, score=score, score_parts={"logit": score})
                for text, score in ((FIRST_ALTERNATE, 0.31), (SECOND_ALTERNATE, 0.18))
            ],
        )  # fmt: skip
    return ApprovalRequest(
        session_id=session.id,
        action=action,
        expectation=expectation,
        alternates=siblings,
        why="policy `evaluated`: score +0.42 is under the threshold +0.50",
    )


class ApprovalSnapshotApp(App[None]):
    """Pushes the modal on mount; cursors don't blink, so screenshots are stable.

    The snapshot plugin finds this class (the file's only App) and instantiates it."""

    decision: Answer | None = None

    async def on_mount(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.store = TraceStore(Path(self.folder.name) / "t.db")
        screen = ApprovalScreen(build_approval_request(self.store))
        await self.push_screen(screen, self.decided)
        for widget in screen.query("Input, TextArea"):
            if isinstance(widget, Input | TextArea):
                widget.cursor_blink = False

    def decided(self, decision: Answer | None) -> None:
        self.decision = decision

    def on_unmount(self) -> None:
        self.store.close()
        self.folder.cleanup()
