"""The approval modal, driven by Pilot over a real SQLite trace store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.syntax import Syntax
from textual.app import App
from textual.binding import Binding
from textual.command import CommandList, CommandPalette
from textual.widgets import Input, OptionList, Static, TextArea

from agents.approval import Answer, ApprovalRequest
from app.screens.approval import (
    EDIT_HIGHLIGHT_MAX_CHARS,
    VIEW_MAX_CHARS,
    ApprovalCommands,
    ApprovalScreen,
    Mode,
)
from storage import NewNode, TraceStore
from tests.app.snapshot_apps.approval_app import (
    ACTION_TEXT,
    EXPECTATION_TEXT,
    SECOND_ALTERNATE,
    build_approval_request,
)
from tests.support.pilot import Notes

SIZE = (120, 40)
SNAPSHOT_APP = Path(__file__).parent / "snapshot_apps" / "approval_app.py"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "t.db") as opened:
        yield opened


@pytest.fixture
def request_(store: TraceStore) -> ApprovalRequest:
    return build_approval_request(store)


class Host(App[None]):
    """Pushes the modal on mount and keeps what it is dismissed with."""

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__()
        self.request = request
        self.decisions: list[Answer | None] = []

    def on_mount(self) -> None:
        self.push_screen(ApprovalScreen(self.request), self.decisions.append)


def modal(app: Host) -> ApprovalScreen:
    assert isinstance(app.screen, ApprovalScreen), "the modal should still be open"
    return app.screen


def shown_text(screen: ApprovalScreen, selector: str) -> str:
    content = screen.query_one(selector, Static).content
    if isinstance(content, Syntax):
        return content.code
    return str(content)


def footer(screen: ApprovalScreen) -> dict[str, tuple[str, bool]]:
    """What the footer offers now: key -> (description, enabled)."""
    return {
        key: (active.binding.description, active.enabled)
        for key, active in screen.active_bindings.items()
        if active.binding.show
    }


async def test_the_modal_shows_the_request(request_: ApprovalRequest) -> None:
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = modal(app)
        assert shown_text(screen, "#approval-why") == request_.why
        assert shown_text(screen, "#approval-code") == ACTION_TEXT.rstrip("\n")
        score = shown_text(screen, "#approval-score")
        assert f"proposed action #{request_.action.id}" in score
        assert "score +0.42 (logit +0.30, length +0.12)" in score
        assert shown_text(screen, "#approval-expectation") == EXPECTATION_TEXT
        candidates = screen.query_one("#approval-candidates", OptionList)
        assert candidates.option_count == 3
        assert "+0.31" in str(candidates.get_option_at_index(1).prompt)
        assert "def action_list_files" in str(candidates.get_option_at_index(1).prompt)
        assert not screen.query_one("#approval-capped", Static).display


async def test_approve(request_: ApprovalRequest) -> None:
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("a")
        await pilot.pause()
        assert app.decisions == [Answer.approve()]
        assert not isinstance(app.screen, ApprovalScreen)


async def test_regenerate(request_: ApprovalRequest) -> None:
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("g")
        await pilot.pause()
        assert app.decisions == [Answer.regenerate()]


async def test_highlighting_an_alternate_shows_its_code(request_: ApprovalRequest) -> None:
    second = request_.alternates[1]
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("down", "down")
        await pilot.pause()
        screen = modal(app)
        assert shown_text(screen, "#approval-code") == SECOND_ALTERNATE.rstrip("\n")
        assert f"alternate #{second.id}" in shown_text(screen, "#approval-score")
        await pilot.press("up", "up")
        await pilot.pause()
        assert shown_text(screen, "#approval-code") == ACTION_TEXT.rstrip("\n")


async def test_pick_the_highlighted_alternate(request_: ApprovalRequest) -> None:
    notes = Notes()
    app = Host(request_)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        # The proposed action is highlighted at first: p says what to do (it was silent).
        assert footer(modal(app))["p"] == ("Pick", True)
        await pilot.press("p")
        await pilot.pause()
        assert app.decisions == []
        assert notes.of("warning") == [
            "the proposed action is highlighted: move to an alternate (down), or press its number"
        ]
        await pilot.press("down", "down")
        await pilot.pause()
        await pilot.press("p")
        await pilot.pause()
        picked = request_.alternates[1].id
        assert app.decisions == [Answer.pick(picked)]
        # said at once: the action runs in the sandbox next, seconds before anything shows
        assert (
            f"alternate #{picked} picked: it runs once the model has written what it expects of it"
            in notes.texts()
        )


async def test_a_digit_picks_that_alternate(request_: ApprovalRequest) -> None:
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("3")  # there are only two
        await pilot.pause()
        assert app.decisions == []
        await pilot.press("1")
        await pilot.pause()
        assert app.decisions == [Answer.pick(request_.alternates[0].id)]


async def test_without_alternates_pick_is_off(store: TraceStore) -> None:
    app = Host(build_approval_request(store, alternates=False))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = modal(app)
        assert screen.check_action("pick", ()) is False
        assert "p" not in footer(screen)
        await pilot.press("p", "1", "down", "p")
        await pilot.pause()
        assert app.decisions == []
        modal(app)


async def test_edit_refuses_invalid_python_then_accepts_the_fix(
    request_: ApprovalRequest,
) -> None:
    notes = Notes()
    app = Host(request_)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await pilot.pause()
        screen = modal(app)
        editor = screen.query_one("#approval-editor", TextArea)
        assert screen.mode is Mode.EDIT and editor.has_focus and editor.display
        assert editor.text == ACTION_TEXT
        assert editor.language == "python"

        await pilot.press("x", "(", "ctrl+s")
        await pilot.pause()
        assert app.decisions == []
        assert modal(app).mode is Mode.EDIT
        assert editor.text == "x(" + ACTION_TEXT
        refusal = notes.seen[-1]
        assert refusal.severity == "error"
        assert refusal.message.startswith("line 1:"), refusal.message

        await pilot.press("backspace", "backspace")
        editor.move_cursor(editor.document.end)
        await pilot.press(*"print(1)", "ctrl+s")
        await pilot.pause()
        assert app.decisions == [Answer.edit(ACTION_TEXT + "print(1)")]


async def test_edit_unchanged_is_refused(request_: ApprovalRequest) -> None:
    notes = Notes()
    app = Host(request_)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        await pilot.press("e", "ctrl+s")
        await pilot.pause()
        assert app.decisions == []
        assert modal(app).mode is Mode.EDIT
        assert notes.texts()[-1] == "unchanged: press a to approve as it is"


async def test_in_edit_mode_only_edit_keys_apply(request_: ApprovalRequest) -> None:
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = modal(app)
        assert {"a", "e", "r", "p", "g"} <= set(footer(screen))
        assert "ctrl+s" not in footer(screen)
        assert footer(screen)["escape"] == ("Back", True)  # viewing: set the decision aside
        await pilot.press("e")
        await pilot.pause()
        keys = footer(screen)
        assert keys["ctrl+s"] == ("Accept edit", True)
        assert keys["escape"] == ("Back", True)
        assert not {"a", "e", "r", "p", "g"} & set(keys)
        assert screen.check_action("approve", ()) is False
        await pilot.press("a")  # typed into the editor, not a verdict
        await pilot.pause()
        assert app.decisions == []
        assert screen.query_one("#approval-editor", TextArea).text == "a" + ACTION_TEXT


async def test_escape_leaves_edit_mode_and_discards_the_text(request_: ApprovalRequest) -> None:
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("e", "z", "z", "escape")
        await pilot.pause()
        screen = modal(app)
        assert screen.mode is Mode.VIEW
        assert not screen.query_one("#approval-editor", TextArea).display
        assert screen.query_one("#approval-code-scroll").display
        assert screen.query_one("#approval-candidates", OptionList).has_focus
        await pilot.press("e")
        await pilot.pause()
        assert screen.query_one("#approval-editor", TextArea).text == ACTION_TEXT
        await pilot.press("escape")
        await pilot.pause()
        assert modal(app).mode is Mode.VIEW and app.decisions == []
        await pilot.press("escape")  # a second escape, in the view, sets the decision aside
        await pilot.pause()
        assert app.decisions == [None] and screen.set_aside


async def test_reject_needs_a_reason(request_: ApprovalRequest) -> None:
    notes = Notes()
    app = Host(request_)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        await pilot.press("r")
        await pilot.pause()
        screen = modal(app)
        reason = screen.query_one("#approval-reason", Input)
        assert screen.mode is Mode.REJECT and reason.display and reason.has_focus
        assert footer(screen)["enter"] == ("Confirm", True)

        await pilot.press(" ", "enter")
        await pilot.pause()
        assert app.decisions == []
        assert notes.seen[-1].severity == "warning"
        assert "reason" in notes.seen[-1].message

        await pilot.press(*"reads the wrong file", "enter")
        await pilot.pause()
        assert app.decisions == [Answer.reject("reads the wrong file")]


async def test_escape_leaves_reject_mode(request_: ApprovalRequest) -> None:
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("r", "n", "o", "escape")
        await pilot.pause()
        screen = modal(app)
        assert screen.mode is Mode.VIEW
        assert not screen.query_one("#approval-reason", Input).display
        await pilot.press("r")
        await pilot.pause()
        assert screen.query_one("#approval-reason", Input).value == ""


async def test_a_huge_action_is_capped_in_the_view_but_edited_whole(store: TraceStore) -> None:
    notes = Notes()
    huge = "".join(f"value_{i} = {i}  # padding the line out a little\n" for i in range(25_000))
    assert len(huge) > 1_000_000
    session = store.create_session("big")
    (action,) = store.add_nodes(session.id, [NewNode("action", huge, score=0.1)])
    app = Host(ApprovalRequest(session.id, action, None, [], why="policy `ask`"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        screen = modal(app)
        shown = shown_text(screen, "#approval-code")
        assert 0 < len(shown) <= VIEW_MAX_CHARS
        assert huge.startswith(shown)
        notice = screen.query_one("#approval-capped", Static)
        assert notice.display and str(notice.content).startswith("capped:")
        assert "no expectation" in shown_text(screen, "#approval-expectation")

        await pilot.press("e")
        await pilot.pause()
        editor = screen.query_one("#approval-editor", TextArea)
        assert editor.text == huge
        assert len(huge) > EDIT_HIGHLIGHT_MAX_CHARS and editor.language is None
        assert "highlighting is off" in notes.texts()[-1]
        await pilot.press("#", "ctrl+s")
        await pilot.pause()
        assert app.decisions == [Answer.edit("#" + huge)]


async def test_the_palette_offers_the_approval_commands(request_: ApprovalRequest) -> None:
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = modal(app)
        names = [hit.text async for hit in ApprovalCommands(screen).discover()]
        assert names == [
            "approval: Approve",
            "approval: Edit",
            "approval: Reject",
            "approval: Pick alternate",
            "approval: Regenerate",
            "approval: Stop session",
            "approval: Copy code",
            "approval: Back",
        ]

        await pilot.press("e")
        await pilot.pause()
        names = [hit.text async for hit in ApprovalCommands(screen).discover()]
        assert names == ["approval: Accept edit", "approval: Back"]
        await pilot.press("escape")
        await pilot.pause()

        # Through the real palette: search, then run the chosen command.
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"regenerate")
        await pilot.pause(0.5)
        prompts = [str(option.prompt) for option in app.screen.query_one(CommandList).options]
        assert any("approval: Regenerate" in prompt for prompt in prompts), prompts
        await pilot.press("down", "enter")
        await pilot.pause(0.2)
        assert app.decisions == [Answer.regenerate()]
        assert not isinstance(app.screen, ApprovalScreen | CommandPalette)


def test_every_binding_has_an_id_and_a_tooltip() -> None:
    bindings = [b for b in ApprovalScreen.BINDINGS if isinstance(b, Binding)]
    assert len(bindings) == len(ApprovalScreen.BINDINGS)
    ids = [b.id for b in bindings]
    assert all(i and i.startswith("approval.") for i in ids)
    assert len(set(ids)) == len(ids)
    assert all(b.tooltip for b in bindings)


def test_snapshot_of_the_modal(snap_compare) -> None:
    assert snap_compare(SNAPSHOT_APP, terminal_size=SIZE)


def test_snapshot_of_the_editor(snap_compare) -> None:
    assert snap_compare(SNAPSHOT_APP, terminal_size=SIZE, press=["e"])


# -- the panel: set aside, a retry, the last outcome ---------------------------------------


async def test_escape_sets_the_decision_aside(request_: ApprovalRequest) -> None:
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = modal(app)
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ApprovalScreen)  # closed, to look around
        assert app.decisions == [None] and screen.set_aside and not screen.stop_requested
        assert not request_.future.done()  # nothing decided


async def test_a_retry_says_it_is_one_and_why(store: TraceStore) -> None:
    first = build_approval_request(store)
    assert first.retry is None
    again = build_approval_request(store)
    again.retry = "try 2 of 3: action #7 failed: NameError: name 'x' is not defined"
    for request, shown in ((first, False), (again, True)):
        app = Host(request)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            retry = modal(app).query_one("#approval-retry", Static)
            assert retry.display is shown
            if shown:
                assert "retry · try 2 of 3: action #7 failed: NameError" in shown_text(
                    modal(app), "#approval-retry"
                )


async def test_the_last_outcome_is_in_the_panel(store: TraceStore) -> None:
    request = build_approval_request(store)
    app = Host(request)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "no outcome yet" in shown_text(modal(app), "#approval-outcome")
    (outcome,) = store.add_nodes(
        request.session_id,
        [NewNode("outcome", "#### check: tests pass\nFAILED test_load", tick=2,
                 meta={"task_passed": 0, "task_total": 1})],
    )  # fmt: skip
    request = build_approval_request(store)
    request.last_outcome = outcome
    app = Host(request)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = shown_text(modal(app), "#approval-outcome")
        assert "last outcome (tick 2) · 0/1 task checks passed" in text
        assert "FAILED test_load" in text


PANEL_APP = Path(__file__).parent / "snapshot_apps" / "panel_app.py"


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot_of_the_panel_over_the_main_screen(snap_compare, size) -> None:  # type: ignore[no-untyped-def]
    """The tree and the status bar in sight beside the panel; the retry and the last
    outcome in it."""
    assert snap_compare(PANEL_APP, terminal_size=size)


async def test_copy_the_code_in_view_and_select_all_while_editing(
    request_: ApprovalRequest,
) -> None:
    """Before, an action's text could not be copied (a drag and ctrl+c gave nothing), and
    the editor's select-all was f7, shown nowhere."""
    app = Host(request_)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert app.clipboard == request_.action.text
        await pilot.press("down", "y")
        await pilot.pause()
        assert app.clipboard == request_.alternates[0].text
        await pilot.press("up", "e")
        await pilot.pause()
        editor = modal(app).query_one("#approval-editor", TextArea)
        await pilot.press("ctrl+a")
        await pilot.pause()
        assert editor.selected_text == editor.text != ""
