"""The approval panel over the main screen, for the snapshot tests: the trace tree and the
status bar stay in sight while the operator decides. The request is a retry, and the
session has an outcome, so the panel shows both."""

from __future__ import annotations

from agents.approval import Answer, ApprovalRequest
from app.screens.approval import ApprovalScreen
from storage import NewNode, NodeStatus
from tests.app.snapshot_apps.main_app import MainSnapshotApp

OUTCOME_TEXT = "#### check: test_load passes\nFAILED tests/test_config.py::test_load - KeyError"


class PanelSnapshotApp(MainSnapshotApp):
    decision: Answer | None = None

    def __init__(self) -> None:
        super().__init__()
        trace = self.trace
        (self.outcome,) = self.store.add_nodes(
            trace.session.id,
            [NewNode("outcome", OUTCOME_TEXT, tick=2, parent_id=trace.edit.id,
                     status=NodeStatus.CHOSEN, meta={"task_passed": 0, "task_total": 1})],
        )  # fmt: skip
        self.request = ApprovalRequest(
            trace.session.id,
            trace.action,
            trace.expectation,
            [trace.first_alternate, trace.second_alternate],
            "the approval policy is `ask`",
            retry=f"try 2 of 3: action #{trace.retry.id} failed: KeyError: 'port'",
            last_outcome=self.outcome,
        )

    def on_ready(self) -> None:
        self.push_screen(ApprovalScreen(self.request), self.decided)

    def decided(self, decision: Answer | None) -> None:
        self.decision = decision


app = PanelSnapshotApp
