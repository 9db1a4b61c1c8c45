"""The label screen over a deterministic store, for the snapshot test.

Two sessions written from fixed texts through the store's public calls, so ids, scores
and counters are the same on every run and no wall-clock time is shown. The newest
branch, first in the queue, is an action the operator rejected (with a reason), so the
screenshot shows a suggestion, a decision, an expectation and the tick's evaluations.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from textual.app import App

from app.screens.label import LabelScreen
from storage import (
    Actor,
    Author,
    EvaluationKind,
    NewNode,
    Node,
    NodeStatus,
    TraceStore,
    Verdict,
)

READ_ACTION = '''def action_read_cipher(subagent):
    """Look at the ciphertext before guessing a key length."""
    return subagent.read_file("cipher.txt")[:200]

self.add_action("Read the ciphertext", action_read_cipher)
'''
WRITE_ACTION = '''def action_write_guess(subagent):
    """Decrypt with the best key so far and save the result."""
    key = "LEMON"
    plain = decrypt(subagent.read_file("cipher.txt"), key)
    subagent.write_file("cipher.txt", plain)
    return plain[:80]

self.add_action("Write the first decryption", action_write_guess)
'''
SAFER_ACTION = """def action_write_solution(subagent):
    plain = decrypt(subagent.read_file("cipher.txt"), "LEMON")
    subagent.write_file("solution.txt", plain)
    return plain[:80]

self.add_action("Write the solution", action_write_solution)
"""
REASON = "it overwrites cipher.txt: write to solution.txt instead"


def build_label_store(store: TraceStore) -> None:
    """The two sessions the snapshot shows: an older one that ran cleanly, and a newer
    one whose last tick ends with a rejected action."""
    older = store.create_session("Make the failing test pass", title="Fix the failing test")
    _, _, orientation = store.add_nodes(
        older.id,
        [
            NewNode("genesis", "the task", author=Author.RUNTIME, status=NodeStatus.CHOSEN),
            NewNode("task-reminder", "Task", tick=1, parent_index=0, author=Author.RUNTIME),
            NewNode("orientation", "Run the tests first.", tick=1, parent_index=1),
        ],
    )
    ran = store.add_node(
        older.id,
        NewNode("action", "run_tests()", tick=1, parent_id=orientation.id, score=1.5),
    )
    store.record_decision(ran.id, Verdict.APPROVE, actor=Actor.OPERATOR)
    store.update_node(ran.id, status=NodeStatus.EXECUTED)
    _tick_end(store, older.id, ran, "The tests run.", {"tests ran": True})

    newer = store.create_session("Break the Vigenère cipher", title="Break the cipher")
    _, _, orientation = store.add_nodes(
        newer.id,
        [
            NewNode("genesis", "the task", author=Author.RUNTIME, status=NodeStatus.CHOSEN),
            NewNode("task-reminder", "Task", tick=1, parent_index=0, author=Author.RUNTIME),
            NewNode("orientation", "Read the ciphertext.", tick=1, parent_index=1),
        ],
    )
    read = store.add_node(
        newer.id,
        NewNode("action", READ_ACTION, tick=1, parent_id=orientation.id, score=2.1),
    )
    store.record_decision(read.id, Verdict.APPROVE, actor=Actor.OPERATOR)
    store.update_node(read.id, status=NodeStatus.EXECUTED)
    outcome = _tick_end(
        store,
        newer.id,
        read,
        "The first 200 characters come back, all capitals.",
        {"cipher read": True, "key length found": False},
    )
    _, orientation = store.add_nodes(
        newer.id,
        [
            NewNode("task-reminder", "Task", tick=2, parent_id=outcome.id, author=Author.RUNTIME),
            NewNode("orientation", "Try the key LEMON.", tick=2, parent_index=0),
        ],
    )
    # The runtime stores every candidate; here the chosen one came second.
    _, rejected = store.add_nodes(
        newer.id,
        [
            NewNode("action", SAFER_ACTION, tick=2, parent_id=orientation.id, score=0.4,
                    status=NodeStatus.ALTERNATE),
            NewNode("action", WRITE_ACTION, tick=2, parent_id=orientation.id, score=0.9,
                    score_parts={"evaluator": 1.4, "lint": -0.5}),
        ],
    )  # fmt: skip
    store.record_decision(rejected.id, Verdict.REJECT, actor=Actor.OPERATOR, reason=REASON)
    store.update_node(rejected.id, status=NodeStatus.REJECTED)
    expectation = store.add_node(
        newer.id,
        NewNode(
            "expectation",
            "solution.txt holds English text that starts with 'ATTACK AT DAWN'.",
            tick=2,
            parent_id=rejected.id,
        ),
    )
    store.add_node(
        newer.id,
        NewNode(
            "observation",
            f"The operator rejected the action above without running it.\nReason: {REASON}",
            tick=2,
            parent_id=expectation.id,
            author=Author.RUNTIME,
        ),
    )


def _tick_end(
    store: TraceStore, session_id: int, action: Node, expectation: str, checks: dict[str, bool]
) -> Node:
    *_, outcome = store.add_nodes(
        session_id,
        [
            NewNode("expectation", expectation, tick=action.tick, parent_id=action.id),
            NewNode("evaluation", "self.add_evaluation(...)", tick=action.tick, parent_index=0),
            NewNode("outcome", "outcome", tick=action.tick, parent_index=1, author=Author.RUNTIME),
        ],
    )
    for name, passed in checks.items():
        store.record_evaluation(
            outcome.id, name, kind=EvaluationKind.CALLBACK, result=passed, passed=passed
        )
    return outcome


class LabelSnapshotApp(App[None]):
    """Pushes the label screen on mount over its own store in a temporary folder.

    The snapshot plugin finds this class (the file's only App) and instantiates it."""

    def on_mount(self) -> None:
        self.folder = tempfile.TemporaryDirectory()
        self.store = TraceStore(Path(self.folder.name) / "traces.db")
        build_label_store(self.store)
        self.push_screen(LabelScreen(self.store))

    def on_unmount(self) -> None:
        self.store.close()
        self.folder.cleanup()
