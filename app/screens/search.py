"""The search screen: every stored block ranked by meaning against what the operator
types; Enter closes it and the main screen's tree jumps to the chosen block.

The memory (agents/memory.py) is opened, and its index brought up to date with the store,
in a thread worker when the screen opens. Each search runs in an exclusive thread worker
that waits a moment first, so fast typing drops the searches it overtakes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, OptionList, Static
from textual.widgets.option_list import Option
from textual.worker import Worker, WorkerState, get_current_worker

from app.actions import SEARCH_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from app.text import first_line, fit
from storage import Session

if TYPE_CHECKING:
    from agents.memory import Hit
    from agents.workbench import SharedMemory
    from storage.views import Sessions

#: The most results a search shows, and of them the most found by their text.
SEARCH_LIMIT = 30
LITERAL_LIMIT = 10
#: A search waits this long (seconds) for the next key before it embeds the text.
TYPING_PAUSE = 0.12
TITLE_WIDTH = 28
PREVIEW = 90


class SearchCommands(ScreenCommands):
    ENTRIES = palette(SEARCH_ACTIONS)


class SearchScreen(ModalScreen["Hit | None"]):
    """Type to search; up and down move through the results; Enter jumps."""

    CSS_PATH = "search.tcss"
    COMMANDS = {SearchCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(SEARCH_ACTIONS)

    def __init__(self, store: Sessions, memory: SharedMemory) -> None:
        super().__init__()
        self.store = store
        self.memory = memory
        #: the results on screen and the text they are for
        self.hits: list[Hit] = []
        self.shown_for = ""
        self.syncing = False
        #: Enter came before the results for the current text: jump once they are in
        self.pick_pending = False
        #: why the memory cannot be used (the embedding model did not load), once known
        self.unavailable: str | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="search-dialog"):
            yield Input(placeholder="Search every trace by meaning", id="search-input")
            yield Static(id="search-status")
            yield OptionList(id="search-results")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#search-dialog").border_title = "search: traces"
        self.query_one("#search-results", OptionList).can_focus = False
        self.query_one("#search-input", Input).focus()
        self.syncing = True
        self.say("opening the memory and indexing new blocks…")
        self.sync_index()

    # -- workers ----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="search-sync",
          name="indexing the traces")  # fmt: skip
    def sync_index(self) -> None:
        worker = get_current_worker()
        with self.memory.use(lambda: worker.is_cancelled) as memory:
            if memory is None:
                return
            added = memory.sync(should_stop=lambda: worker.is_cancelled)
        if not worker.is_cancelled:
            self.app.call_from_thread(self.synced, added)

    @work(thread=True, exclusive=True, exit_on_error=False, group="search", name="searching")
    def run_search(self, text: str) -> None:
        worker = get_current_worker()
        time.sleep(TYPING_PAUSE)
        if worker.is_cancelled:
            return
        with self.memory.use(lambda: worker.is_cancelled) as memory:
            if memory is None:
                return
            literal = memory.literal(text, k=LITERAL_LIMIT)
            found = {hit.node_id for hit in literal}
            meant = [h for h in memory.search(text, k=SEARCH_LIMIT) if h.node_id not in found]
            hits = literal + meant[: SEARCH_LIMIT - len(literal)]
        if worker.is_cancelled:
            return
        sessions = self.store.sessions_by_id({hit.session_id for hit in hits})
        self.app.call_from_thread(self.show_results, text, hits, sessions)

    @on(Worker.StateChanged)
    def worker_failed(self, event: Worker.StateChanged) -> None:
        if event.state is not WorkerState.ERROR or event.worker.error is None:
            return
        from agents.memory import MemoryUnavailable

        if event.worker.group == "search-sync":
            self.syncing = False
        error = event.worker.error
        cause = getattr(error, "orig", None) or error
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        if self.unavailable is not None:
            return  # said once: every search would fail the same way
        if isinstance(error, MemoryUnavailable):
            self.unavailable = reason
        self.say(f"{event.worker.name} failed: {reason}", error=True)
        self.notify(f"{event.worker.name} failed: {reason}", severity="error", markup=False)

    # -- back on the UI thread ------------------------------------------------------------

    def synced(self, added: int) -> None:
        self.syncing = False
        if self.text:
            self.search_now()  # the new blocks may rank
        else:
            news = f"{added:,} new blocks indexed" if added else "the index is up to date"
            self.say(f"{news}: type what you are looking for")

    @property
    def text(self) -> str:
        return self.query_one("#search-input", Input).value.strip()

    @on(Input.Changed, "#search-input")
    def text_changed(self) -> None:
        self.search_now()

    def search_now(self) -> None:
        self.pick_pending = False
        if self.unavailable is not None:
            self.say(f"no search: {self.unavailable}", error=True)
            return
        if not self.text:
            self.workers.cancel_group(self, "search")
            self.show_results("", [], {})
            return
        if self.syncing:
            self.say("indexing new blocks… the search runs when they are in")
        else:
            self.say("searching…")
        self.run_search(self.text)

    def show_results(self, text: str, hits: Sequence[Hit], sessions: Mapping[int, Session]) -> None:
        if text != self.text:
            return  # overtaken by newer typing
        self.hits = list(hits)
        self.shown_for = text
        results = self.query_one("#search-results", OptionList)
        results.clear_options()
        results.add_options(Option(result_line(hit, sessions)) for hit in hits)
        if hits:
            results.highlighted = 0
        if not text:
            self.say("type what you are looking for")
        elif hits:
            held = sum(hit.literal for hit in hits)
            first = f"{held} hold the text (=), then " if held else ""
            self.say(
                f"{first}{len(hits) - held} by meaning, best first · "
                "enter jumps to the highlighted one"
            )
        else:
            self.say("nothing indexed matches yet")
        if self.pick_pending:
            self.pick_pending = False
            self.action_pick()

    def say(self, message: str, *, error: bool = False) -> None:
        status = self.query_one("#search-status", Static)
        status.set_class(error, "-error")
        status.update(Text(message))

    # -- actions ----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("pick", "move", "page"):
            return bool(self.hits) or None
        return True

    def action_move(self, step: int) -> None:
        results = self.query_one("#search-results", OptionList)
        if step > 0:
            results.action_cursor_down()
        else:
            results.action_cursor_up()

    def action_page(self, step: int) -> None:
        results = self.query_one("#search-results", OptionList)
        if step > 0:
            results.action_page_down()
        else:
            results.action_page_up()

    @on(Input.Submitted, "#search-input")
    def submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_pick()

    @on(OptionList.OptionSelected, "#search-results")
    def clicked(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.query_one("#search-results", OptionList).highlighted = event.option_index
        self.action_pick()

    def action_pick(self) -> None:
        if not self.text:
            return
        if self.shown_for != self.text:
            self.pick_pending = True  # the results for this text are on their way
            return
        index = self.query_one("#search-results", OptionList).highlighted
        if index is not None and 0 <= index < len(self.hits):
            self.dismiss(self.hits[index])

    def action_back(self) -> None:
        self.dismiss(None)


def label_mark(label: str | None) -> Text:
    if label == "good":
        return Text("+", style="bold green")
    if label == "bad":
        return Text("-", style="bold red")
    return Text(" ")


def session_title(session: Session | None, width: int = TITLE_WIDTH) -> str:
    if session is None:
        return ""
    title = session.title or first_line(session.task, width)
    return fit(title, width)


def result_line(hit: Hit, sessions: Mapping[int, Session]) -> Text:
    """Score (`=` for a block that holds the text), label mark, where (session, tick,
    block), kind, and the block's first line."""
    return Text.assemble(
        ("    = ", "bold") if hit.literal else (f"{hit.score:5.2f} ", "dim"),
        label_mark(hit.label),
        " ",
        (f"#{hit.session_id} ", "bold"),
        (session_title(sessions.get(hit.session_id)), ""),
        ("  ·  ", "dim"),
        f"tick {hit.tick}",
        ("  ·  ", "dim"),
        (f"#{hit.node_id} {hit.kind}", "bold" if hit.kind == "action" else ""),
        "\n      ",
        (first_line(hit.text, PREVIEW), "dim"),
    )
