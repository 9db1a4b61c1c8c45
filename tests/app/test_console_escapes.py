"""Escape sequences in model text are drawn escaped in the console.

Textual writes a widget's text to the terminal as it is (it strips only BEL, BS, VT, FF and
CR), so an ESC in a block, a message or an evaluation's title would reach the terminal:
OSC 52 sets the clipboard, OSC 0 the title, SGR 8 hides text. Driven by Pilot over a real
SQLite store whose blocks carry the attack: every pane that shows model text draws lines
with no control character, and the attack visible as escapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widget import Widget
from textual.widgets import Static, TextArea

from agents.approval import ApprovalRequest
from agents.settings import Settings
from app.console import ConsoleApp
from app.screens.approval import ApprovalScreen
from app.widgets.block_view import BlockView, Candidates
from app.widgets.chat import ChatLog
from app.widgets.inspector import Inspector
from app.widgets.trace_tree import TraceTree
from storage import Author, EvaluationKind, NewNode, Node, NodeStatus, SessionStatus, TraceStore
from tests.app.test_approval import Host
from tests.app.test_console import SIZE, expand_first_session, select, settle
from tests.app.test_main_screen import open_tick

#: Clipboard, title, hidden text, an 8-bit CSI, a line overwritten.
ATTACK = "\x1b]52;c;b3duZWQ=\x07\x1b]0;owned\x07\x1b[8mhidden\x9b2J\rover"
#: How the operator sees it.
SHOWN = r"\x1b]52;c;b3duZWQ=\x07\x1b]0;owned\x07\x1b[8mhidden\x9b2J\x0dover"
CONTROLS = {chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))} - {"\t", "\n"}
ACTION = f'def act(subagent):\n    return "{ATTACK}"\nself.add_action("{ATTACK}", act)'
ACTION_SHOWN = f'def act(subagent):\n    return "{SHOWN}"\nself.add_action("{SHOWN}", act)'


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def attacked_session(store: TraceStore) -> tuple[Node, Node]:
    """A session whose model-written blocks, results and evaluation titles all carry the
    attack: (its action, its expectation)."""
    session = store.create_session("escape", title="escapes", status=SessionStatus.COMPLETED)
    orientation, action, _alternate, expectation = store.add_nodes(
        session.id,
        [
            NewNode("orientation", f"# {ATTACK}", tick=1, status=NodeStatus.CHOSEN),
            NewNode("action", ACTION, tick=1, parent_index=0, status=NodeStatus.EXECUTED,
                    score=0.4, score_parts={"evaluator": 0.4}),
            NewNode("action", f"{ATTACK} = 1", tick=1, parent_index=0,
                    status=NodeStatus.ALTERNATE, score=0.1, score_parts={"evaluator": 0.1}),
            NewNode("expectation", ATTACK, tick=1, parent_index=1, status=NodeStatus.CHOSEN),
        ],
    )  # fmt: skip
    store.add_nodes(
        session.id,
        [NewNode("observation", ATTACK, tick=1, parent_id=expectation.id,
                 author=Author.RUNTIME, status=NodeStatus.CHOSEN, meta={"title": ATTACK})],
    )  # fmt: skip
    store.record_evaluation(action.id, f"passes {ATTACK}", result=ATTACK, passed=True)
    store.record_evaluation(action.id, f"fails {ATTACK}", result=f"{ATTACK}\n" * 3, passed=False)
    store.record_evaluation(action.id, f"raises {ATTACK}", passed=False, error=ATTACK)
    store.record_evaluation(
        action.id, ATTACK, kind=EvaluationKind.OBSERVATION, result={"seen": ATTACK}
    )
    assert orientation.id
    return action, expectation


def drawn(widget: Widget) -> str:
    """The text of every line the widget draws (what Textual writes to the terminal,
    less the styles)."""
    return "\n".join(widget.render_line(y).text for y in range(widget.size.height))


async def test_every_pane_draws_model_text_escaped(store: TraceStore) -> None:
    action, _ = attacked_session(store)
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await expand_first_session(app, pilot)
        await open_tick(app, pilot, action.session_id, 1)
        await select(app, pilot, action)
        app.main.query_one(ChatLog).say("agent", f"told {ATTACK}")
        await settle(app, pilot)
        for pane in (TraceTree, BlockView, Candidates, Inspector, ChatLog):
            text = drawn(app.main.query_one(pane))
            assert not CONTROLS & set(text), (pane.__name__, text)
            assert "\\x1b]" in text, (pane.__name__, text)
        assert f"agent: told {SHOWN}" in drawn(app.main.query_one(ChatLog))

        # a session's end is told in a toast and kept in the message log, its last
        # message (the model's) quoted
        app.notify(f"session 1 completed: done {ATTACK}", markup=False)
        await pilot.pause()
        text = "\n".join(drawn(toast) for toast in app.screen.query("Toast"))
        assert not CONTROLS & set(text) and "\\x1b]52;" in text, text
        logged = [entry.message for entry in app.message_log]
        assert logged[-1] == f"session 1 completed: done {SHOWN}"


async def test_the_approval_modal_and_its_editor_show_the_action_escaped(
    store: TraceStore,
) -> None:
    action, expectation = attacked_session(store)
    request = ApprovalRequest(
        session_id=action.session_id,
        action=action,
        expectation=expectation,
        alternates=[],
        why="policy `ask`",
    )
    app = Host(request)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ApprovalScreen)
        for selector in ("#approval-code", "#approval-expectation"):
            text = drawn(screen.query_one(selector, Static))
            assert not CONTROLS & set(text) and "\\x1b]52;" in text, (selector, text)
        await pilot.press("e")
        await pilot.pause()
        editor = screen.query_one(TextArea)
        assert editor.text == ACTION_SHOWN
        text = drawn(editor)
        assert not CONTROLS & set(text) and "\\x1b]52;" in text, text
        # unchanged, it is not an edit: nothing is decided
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is screen and app.decisions == []
