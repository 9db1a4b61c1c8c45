"""Similar-branch labelling: from a labelled block, the unlabelled blocks most like it
(by meaning, from the retrieval memory), to give the chosen ones the same label at once.

The memory is brought up to date and asked in a thread worker; the labels are written in
another. The screen returns how many blocks it labelled (None when it gave none).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Footer, SelectionList, Static
from textual.widgets.selection_list import Selection
from textual.worker import Worker, WorkerState, get_current_worker

from app.actions import SIMILAR_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from app.screens.search import result_line
from app.text import first_line
from storage import Label, LabelScope, LabelValue, Node, Session, StoreError

if TYPE_CHECKING:
    from agents.memory import Hit
    from agents.workbench import SharedMemory
    from storage.views import Review

#: The most similar blocks offered.
SIMILAR_LIMIT = 20
SCOPE_WORDS = {LabelScope.BLOCK: "this block", LabelScope.PATH: "the whole path to it"}


class SimilarCommands(ScreenCommands):
    ENTRIES = palette(SIMILAR_ACTIONS)


class SimilarScreen(ModalScreen[int | None]):
    """The blocks most like a labelled one; space selects, `l` labels the selected."""

    CSS_PATH = "similar.tcss"
    COMMANDS = {SimilarCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(SIMILAR_ACTIONS)

    busy: reactive[bool] = reactive(True, init=False, bindings=True)

    def __init__(self, store: Review, memory: SharedMemory, label: Label) -> None:
        super().__init__()
        self.store = store
        self.memory = memory
        self.label = label
        self.source: Node | None = None
        self.hits: list[Hit] = []
        #: labels are being written: the screen stays until they are
        self.writing = False

    def compose(self) -> ComposeResult:
        with Vertical(id="similar-dialog"):
            yield Static(id="similar-source")
            yield Static(id="similar-status")
            yield SelectionList[int](id="similar-list")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#similar-dialog").border_title = "similar branches"
        self.query_one("#similar-source", Static).update(self.source_text())
        self.say("opening the memory and indexing new blocks…")
        self.find_similar()

    # -- workers ----------------------------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="similar",
          name="finding similar blocks")  # fmt: skip
    def find_similar(self) -> None:
        worker = get_current_worker()
        source = self.store.get_node(self.label.node_id)
        self.app.call_from_thread(self.show_source, source)
        with self.memory.use(lambda: worker.is_cancelled) as memory:
            if memory is None:
                return
            memory.sync(should_stop=lambda: worker.is_cancelled)
            if worker.is_cancelled:
                return
            hits = memory.similar_unlabelled(source.id, k=SIMILAR_LIMIT)
        sessions = self.store.sessions_by_id({hit.session_id for hit in hits})
        self.app.call_from_thread(self.show_hits, hits, sessions)

    @work(thread=True, exclusive=True, exit_on_error=False, group="similar",
          name="labelling the similar blocks")  # fmt: skip
    def write_labels(self, node_ids: Sequence[int]) -> None:
        label = self.label
        given, failed = 0, 0
        for node_id in node_ids:
            try:
                self.store.add_label(
                    node_id, label.value, scope=label.scope, note=f"like block {label.node_id}"
                )
            except StoreError:
                failed += 1  # removed meanwhile: the others still get their label
            else:
                given += 1
        self.app.call_from_thread(self.labelled, given, failed)

    @on(Worker.StateChanged)
    def worker_failed(self, event: Worker.StateChanged) -> None:
        if event.state is not WorkerState.ERROR or event.worker.error is None:
            return
        self.busy = self.writing = False
        error = event.worker.error
        cause = getattr(error, "orig", None) or error
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        self.say(f"{event.worker.name} failed: {reason}", error=True)
        self.notify(f"{event.worker.name} failed: {reason}", severity="error", markup=False)

    # -- back on the UI thread ------------------------------------------------------------

    def show_source(self, source: Node) -> None:
        self.source = source
        self.query_one("#similar-source", Static).update(self.source_text())

    def show_hits(self, hits: Sequence[Hit], sessions: Mapping[int, Session]) -> None:
        self.hits = list(hits)
        choices = self.query_one("#similar-list", SelectionList)
        choices.clear_options()
        choices.add_options(
            Selection(result_line(hit, sessions), hit.node_id, False) for hit in hits
        )
        choices.focus()
        self.busy = False
        if hits:
            self.say(
                f"{len(hits)} unlabelled blocks, most similar first · space selects, "
                f"l labels the selected {self.label.value.value}"
            )
        else:
            self.say("no unlabelled block is like this one")

    def labelled(self, given: int, failed: int) -> None:
        value = self.label.value.value
        message = f"labelled {given} similar block{'s' if given != 1 else ''} {value}"
        message += f", like block #{self.label.node_id}"
        if failed:
            message += f" ({failed} no longer in the store)"
        self.notify(message, severity="warning" if failed else "information", markup=False)
        self.dismiss(given or None)

    def source_text(self) -> Text:
        label = self.label
        good = label.value is LabelValue.GOOD
        text = Text.assemble(
            ("like block ", "dim"),
            (f"#{label.node_id}", "bold"),
            ("  labelled ", "dim"),
            (label.value.value, "bold green" if good else "bold red"),
            (f" ({SCOPE_WORDS[label.scope]})", "dim"),
        )
        source = self.source
        if source is not None:
            text.append(f"  ·  session #{source.session_id} · tick {source.tick} · {source.kind}")
            text.append(f"\n{first_line(source.text, 120)}", style="italic")
        return text

    def say(self, message: str, *, error: bool = False) -> None:
        status = self.query_one("#similar-status", Static)
        status.set_class(error, "-error")
        status.update(Text(message))

    # -- actions ----------------------------------------------------------------------------

    @on(SelectionList.SelectedChanged)
    def selection_changed(self) -> None:
        self.refresh_bindings()

    @property
    def chosen(self) -> list[int]:
        return list(self.query_one("#similar-list", SelectionList).selected)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "apply":
            return None if self.busy or not self.chosen else True
        if action in ("select_all", "select_none"):
            return None if self.busy or not self.hits else True
        if action == "back":
            return None if self.writing else True
        return True

    def action_apply(self) -> None:
        chosen = self.chosen
        if self.busy or not chosen:
            return
        self.busy = self.writing = True
        self.say(f"labelling {len(chosen)} blocks…")
        self.write_labels(chosen)

    def action_select_all(self) -> None:
        self.query_one("#similar-list", SelectionList).select_all()

    def action_select_none(self) -> None:
        self.query_one("#similar-list", SelectionList).deselect_all()

    def action_back(self) -> None:
        if not self.writing:
            self.dismiss(None)
