"""The approval modal: the operator's verdict on one proposed action.

The runtime blocks on `ApprovalRequest.future`; the console pushes this screen with the
request and resolves the future with the `Answer` the screen is dismissed with. The
screen never touches the store or the future itself, so it can be driven (and tested) on
its own.

Three modes share one screen: viewing the candidates, editing the action, typing a reason
to reject it. `check_action` ties every binding to a mode, so the footer (and the command
palette) only offer what applies now.

The screen is a panel over the main screen's right side: the trace tree and the status bar
stay in sight while the operator decides, and the panel itself shows the candidates, the
expectation and the session's last outcome. Escape sets the decision aside (`set_aside`):
the screen closes with no decision and whoever pushed it keeps the request pending.
"""

from __future__ import annotations

import ast
from enum import StrEnum
from typing import ClassVar

from rich.syntax import Syntax
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, OptionList, Static, TextArea
from textual.widgets.option_list import Option

from agents.approval import Answer, ApprovalRequest
from agents.safe_text import escape_controls
from app.actions import APPROVAL_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from storage import Node

#: The view renders at most this much of a text; the editor always gets all of it.
VIEW_MAX_LINES = 400
VIEW_MAX_CHARS = 40_000
#: Textual's TextArea re-highlights the whole document on every keystroke (about a second
#: per megabyte), so longer texts are edited without highlighting.
EDIT_HIGHLIGHT_MAX_CHARS = 100_000
#: How much of a candidate's first line its row in the list shows.
PREVIEW_CHARS = 60


class Mode(StrEnum):
    VIEW = "view"
    EDIT = "edit"
    REJECT = "reject"


#: Which mode each action belongs to; `check_action` refines pick and pick_number.
ACTION_MODES: dict[str, Mode] = {
    "approve": Mode.VIEW,
    "edit": Mode.VIEW,
    "reject": Mode.VIEW,
    "pick": Mode.VIEW,
    "pick_number": Mode.VIEW,
    "regenerate": Mode.VIEW,
    "stop_session": Mode.VIEW,
    "copy": Mode.VIEW,
    "accept_edit": Mode.EDIT,
    "select_all": Mode.EDIT,
    "confirm_reject": Mode.REJECT,
}


def capped(text: str) -> tuple[str, str | None]:
    """The part of `text` the view renders, and a note saying what was left out (or None).

    Rendering is the slow part (highlighting, wrapping), so a megabyte of model output is
    cut to its head here rather than handed to Rich."""
    text = escape_controls(text)
    head = text[:VIEW_MAX_CHARS]
    lines = head.splitlines()
    if len(lines) > VIEW_MAX_LINES:
        head = "\n".join(lines[:VIEW_MAX_LINES])
    if len(head) >= len(text):
        return text, None
    total_lines = text.count("\n") + 1
    shown_lines = head.count("\n") + 1
    return head, (
        f"capped: showing {len(head):,} of {len(text):,} characters "
        f"({shown_lines:,} of {total_lines:,} lines); press e to edit the full text"
    )


def first_line(text: str) -> str:
    for line in text[: VIEW_MAX_CHARS // 4].splitlines():
        if line.strip():
            return line.strip()[:PREVIEW_CHARS]
    return "(empty)"


def score_text(node: Node) -> Text:
    """`score +0.62 (tests +0.50, style +0.12)`, or `not scored`."""
    if node.score is None:
        return Text("not scored", style="dim")
    text = Text.assemble(("score ", "dim"), (f"{node.score:+.2f}", "bold"))
    if node.score_parts:
        parts = ", ".join(f"{name} {value:+.2f}" for name, value in node.score_parts.items())
        text.append(f" ({parts})", style="dim")
    return text


class ApprovalCommands(ScreenCommands):
    """The approval screen's verbs in the command palette, limited to those that apply
    in the screen's current mode."""

    ENTRIES = palette(APPROVAL_ACTIONS)


class ApprovalScreen(ModalScreen[Answer]):
    """Approve, edit, reject, pick an alternate or regenerate one proposed action."""

    CSS_PATH = "approval.tcss"
    COMMANDS = {ApprovalCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(APPROVAL_ACTIONS)

    mode: reactive[Mode] = reactive(Mode.VIEW, init=False, bindings=True)

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__()
        self.request = request
        #: the proposed action first, then its alternates: the rows of the candidate list
        self.candidates: list[Node] = [request.action, *request.alternates]
        #: the candidate list's highlighted row (0 is the proposed action)
        self.highlighted = 0
        #: closed with `x`: whoever pushed the modal stops the session
        self.stop_requested = False
        #: closed with escape: the decision stays pending, to be taken up again
        self.set_aside = False

    # -- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        action = self.request.action
        with Vertical(id="approval-dialog") as dialog:
            dialog.border_title = f"Approve action #{action.id}? · tick {action.tick}"
            dialog.border_subtitle = "esc: decide later (d comes back)"
            yield Static(Text(self.request.why), id="approval-why")
            retry = Static(Text(f"retry · {self.request.retry}"), id="approval-retry")
            retry.display = self.request.retry is not None
            yield retry
            yield Static(id="approval-score")
            with VerticalScroll(id="approval-code-scroll"):
                yield Static(id="approval-code")
            yield Static(id="approval-capped")
            yield TextArea.code_editor("", language="python", id="approval-editor")
            with Horizontal(id="approval-side"):
                with VerticalScroll(id="approval-expectation-scroll") as scroll:
                    scroll.border_title = "expectation · last outcome"
                    yield Static(self.expectation_text(), id="approval-expectation")
                    yield Static(self.outcome_text(), id="approval-outcome")
                candidates = OptionList(*self.candidate_options(), id="approval-candidates")
                candidates.border_title = f"candidates ({len(self.request.alternates)} alt)"
                yield candidates
            yield Input(placeholder="why reject it? (enter confirms, escape goes back)",
                        id="approval-reason")  # fmt: skip
        yield Footer()

    def expectation_text(self) -> Text:
        expectation = self.request.expectation
        if expectation is None or not expectation.text.strip():
            return Text("no expectation was written for this action", style="dim italic")
        head, note = capped(expectation.text)
        return Text(head + (f"\n\n[{note}]" if note else ""))

    def outcome_text(self) -> Text:
        """The session's last outcome: what the checks said before this action."""
        outcome = self.request.last_outcome
        if outcome is None:
            return Text("\nno outcome yet in this session", style="dim italic")
        head, note = capped(outcome.text.strip())
        text = Text(f"\nlast outcome (tick {outcome.tick})", style="bold")
        meta = outcome.meta
        if meta.get("task_total"):
            text.append(f" · {meta['task_passed']}/{meta['task_total']} task checks passed")
        text.append("\n" + head + (f"\n\n[{note}]" if note else ""), style="")
        return text

    def candidate_options(self) -> list[Option]:
        options = []
        for index, node in enumerate(self.candidates):
            label = "proposed" if index == 0 else f"alt {index}"
            score = "  —  " if node.score is None else f"{node.score:+.2f}"
            prompt = Text.assemble(
                (f"{label:<8} ", "bold" if index == 0 else ""),
                (f"{score} ", "dim"),
                first_line(node.text),
                no_wrap=True,
                overflow="ellipsis",
            )
            options.append(Option(prompt, id=f"node-{node.id}"))
        return options

    def on_mount(self) -> None:
        if not self.is_current:
            return  # dismissed before it mounted: the session ended while it was pushed
        found = self.query("#approval-candidates").results(OptionList)
        candidates = next(found, None)
        if candidates is None:
            # The dialog's own children can mount after the screen (seen on a loaded
            # machine when a request follows the last at once): set up once they are.
            self.call_after_refresh(self.on_mount)
            return
        candidates.highlighted = 0
        candidates.focus()
        self.show_node(self.request.action)
        self.apply_mode(self.mode)

    # -- showing ------------------------------------------------------------------------

    def show_node(self, node: Node) -> None:
        """Put `node`'s code, score and parts in the view."""
        if node.id == self.request.action.id:
            where = Text(f"proposed action #{node.id}  ", style="bold")
        else:
            where = Text(f"alternate #{node.id} (p picks it)  ", style="bold yellow")
        self.query_one("#approval-score", Static).update(Text.assemble(where, score_text(node)))
        head, note = capped(node.text)
        code = Syntax(
            head.rstrip("\n"), "python", line_numbers=True, word_wrap=True, theme="ansi_dark"
        )
        self.query_one("#approval-code", Static).update(code)
        notice = self.query_one("#approval-capped", Static)
        notice.update(Text(note or ""))
        notice.display = note is not None
        self.query_one("#approval-code-scroll", VerticalScroll).scroll_home(animate=False)

    @on(OptionList.OptionHighlighted, "#approval-candidates")
    def candidate_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self.highlighted = event.option_index
        if not self.is_attached:
            return  # the session stopped and the modal closed with this still queued
        self.show_node(self.candidates[event.option_index])
        self.refresh_bindings()

    def highlighted_alternate(self) -> Node | None:
        return self.candidates[self.highlighted] if self.highlighted > 0 else None

    # -- modes --------------------------------------------------------------------------

    def watch_mode(self, mode: Mode) -> None:
        self.apply_mode(mode)

    def apply_mode(self, mode: Mode) -> None:
        for name in Mode:
            self.set_class(mode is name, f"-{name.value}")
        if mode is Mode.EDIT:
            self.query_one("#approval-editor", TextArea).focus()
        elif mode is Mode.REJECT:
            self.query_one("#approval-reason", Input).focus()
        else:
            self.query_one("#approval-candidates", OptionList).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        wanted = ACTION_MODES.get(action)
        if wanted is None:
            return True
        if wanted is not self.mode:
            return False
        if action == "pick":
            # with the proposed action highlighted, `p` says what to do (it did nothing)
            return bool(self.request.alternates)
        if action == "pick_number":
            number = parameters[0] if parameters else 0
            return isinstance(number, int) and 1 <= number <= len(self.request.alternates)
        return True

    # -- verdicts -----------------------------------------------------------------------

    def decide(self, decision: Answer) -> None:
        # `dismiss` pops whatever screen is on top, so only decide while this one is.
        if self.is_current:
            self.dismiss(decision)

    def action_approve(self) -> None:
        self.decide(Answer.approve())

    def action_regenerate(self) -> None:
        self.decide(Answer.regenerate())

    def action_stop_session(self) -> None:
        if self.is_current:
            self.stop_requested = True
            self.dismiss(None)

    def action_pick(self) -> None:
        alternate = self.highlighted_alternate()
        if alternate is None:
            self.notify(
                "the proposed action is highlighted: move to an alternate (down), or press "
                "its number",
                severity="warning",
            )
            return
        self._pick(alternate)

    def action_pick_number(self, number: int) -> None:
        self._pick(self.request.alternates[number - 1])

    def _pick(self, alternate: Node) -> None:
        # the model writes the expectation, then the action runs: seconds before anything
        # else shows
        if self.is_current:
            self.notify(
                f"alternate #{alternate.id} picked: it runs once the model has written "
                "what it expects of it",
                markup=False,
            )
        self.decide(Answer.pick(alternate.id))

    def action_copy(self) -> None:
        """The code in view to the clipboard (the terminal's, over OSC 52: an SSH session's
        too, where the terminal allows it)."""
        node = self.highlighted_alternate() or self.request.action
        self.app.copy_to_clipboard(node.text)
        self.notify(f"copied the code of #{node.id} ({len(node.text):,} characters)", markup=False)

    def action_select_all(self) -> None:
        self.query_one("#approval-editor", TextArea).select_all()

    def action_edit(self) -> None:
        # the editor writes its text to the terminal as it is: controls go in escaped (in
        # a string literal, `\x1b` is the same character)
        text = escape_controls(self.request.action.text)
        editor = self.query_one("#approval-editor", TextArea)
        highlight = len(text) <= EDIT_HIGHLIGHT_MAX_CHARS
        editor.language = "python" if highlight else None
        editor.load_text(text)
        editor.move_cursor((0, 0))
        self.mode = Mode.EDIT
        if not highlight:
            self.notify(
                f"{len(text):,} characters: highlighting is off so typing stays quick",
                severity="information",
            )

    def action_accept_edit(self) -> None:
        editor = self.query_one("#approval-editor", TextArea)
        text = editor.text
        try:
            ast.parse(text)
        except SyntaxError as error:
            line = error.lineno or 1
            self.notify(
                f"line {line}: {error.msg}",
                title="Not valid Python; the edit stays open",
                severity="error",
                markup=False,
            )
            editor.move_cursor((max(line - 1, 0), max((error.offset or 1) - 1, 0)))
            return
        except ValueError as error:  # e.g. a NUL byte, which Python 3.11 reports this way
            self.notify(str(error), title="Not valid Python; the edit stays open", severity="error")
            return
        except (RecursionError, MemoryError):  # e.g. 1+1+...+1 many thousand times over
            self.notify(
                "nested too deeply for Python to parse",
                title="Not valid Python; the edit stays open",
                severity="error",
            )
            return
        if text.strip() == escape_controls(self.request.action.text).strip():
            self.notify("unchanged: press a to approve as it is", severity="warning")
            return
        self.decide(Answer.edit(text))

    def action_reject(self) -> None:
        self.query_one("#approval-reason", Input).clear()
        self.mode = Mode.REJECT

    def action_confirm_reject(self) -> None:
        reason = self.query_one("#approval-reason", Input).value.strip()
        if not reason:
            self.notify("a reason is needed: the agent reads it as feedback", severity="warning")
            return
        self.decide(Answer.reject(reason))

    @on(Input.Submitted, "#approval-reason")
    def reason_submitted(self, event: Input.Submitted) -> None:
        """The Input's own enter, reached when confirm_reject is rebound to another key."""
        event.stop()
        self.action_confirm_reject()

    def action_back(self) -> None:
        """Back to viewing (an edit in progress is discarded); from viewing, the panel
        closes with nothing decided and the request stays pending."""
        if self.mode is Mode.VIEW:
            if self.is_current:
                self.set_aside = True
                self.dismiss(None)
            return
        if self.mode is Mode.EDIT:
            self.query_one("#approval-editor", TextArea).load_text("")
        self.mode = Mode.VIEW
