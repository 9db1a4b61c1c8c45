"""The label screen: the queue of unlabelled branches, one key per verdict.

The screen holds a window of the queue (a page at a time, fetched past the last item it
holds) and reads and writes the store only in thread workers, so a store of any size
opens as fast as an empty one. While a label is being written, the keys that act on the
queue are greyed out rather than queued, so a label can never land on the wrong item.
After each label the training-data counters are recounted in a worker of their own (only
the sessions touched since the last count; a newer count cancels an older one).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Footer, Input, Static
from textual.worker import Worker, WorkerState, get_current_worker

from agents.safe_text import escape_controls
from agents.workbench import SharedMemory, Workbench
from app.actions import LABEL_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from app.labelling import Given, Labeller
from app.text import one_line
from storage import (
    Author,
    EvaluationResult,
    LabelScope,
    LabelValue,
    Node,
    NodeStatus,
)
from training.label_pages import PAGE_SIZE, QueueItem, QueueKey, QueuePage, load_queue_page, through
from training.rules import Counts, TrainingTally, evaluation_failed, evaluation_passed

if TYPE_CHECKING:
    from storage.views import Labelling

EMPTY = "nothing left to label"
#: Fetch the next page when the window holds this few items.
LOW_WATER = PAGE_SIZE // 4
#: The code view renders at most this much of a block (rendering is the slow part).
VIEW_MAX_CHARS = 20_000
VIEW_MAX_LINES = 300
STATUS_STYLES = {
    NodeStatus.EXECUTED: "green",
    NodeStatus.APPROVED: "green",
    NodeStatus.FAILED: "red",
    NodeStatus.REJECTED: "red",
    NodeStatus.EDITED: "yellow",
    NodeStatus.ALTERNATE: "dim",
}
QUEUE_ACTIONS = ("good", "bad", "confirm", "skip", "undo", "note", "toggle_scope", "similar")
SCOPE_WORDS = {LabelScope.BLOCK: "this block", LabelScope.PATH: "the whole path to this tick"}


class LabelCommands(ScreenCommands):
    """The label screen's verbs in the command palette, those that apply now."""

    ENTRIES = palette(LABEL_ACTIONS)


class LabelScreen(Screen[None]):
    """Label unlabelled branches good or bad, newest first, with undo."""

    CSS_PATH = "label.tcss"
    COMMANDS = {LabelCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(LABEL_ACTIONS)

    busy: reactive[bool] = reactive(False, init=False, bindings=True)
    scope: reactive[LabelScope] = reactive(LabelScope.BLOCK, init=False, bindings=True)

    def __init__(self, store: Labelling, session_id: int | None = None) -> None:
        super().__init__()
        self.store = store
        self.session_id = session_id
        #: the queue from the current item on, as far as it is loaded
        self.items: list[QueueItem] = []
        self.more = False
        self.tail: QueueKey | None = None
        self.loaded = False
        self.loading_more = False
        #: bumped whenever the window is replaced, so a late page for an old one is dropped
        self.window = 0
        #: queue items from the current one on (None until counted)
        self.left: int | None = None
        #: the labels given here, each with the queue item it was given from
        self.labeller: Labeller[QueueItem] = Labeller(store)
        #: blocks labelled alike from the similar-branches screen (not undone by `u`)
        self.alike = 0
        self.skipped = 0
        self.note: str | None = None
        self.counts: Counts | None = None
        #: blocks the task's checks labelled (`agent-console improve`), counted apart
        self.automatic: int | None = None
        self.tally = TrainingTally()
        #: what the store worker that holds the queue's keys is doing, for the counters
        self.doing = ""
        self.offered: tuple[bool | None, ...] = ()
        #: a label was given or taken back: recount once the queue is read again
        self.recount = False

    # -- layout -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="label-counters")
        with VerticalScroll(id="label-body"):
            yield Static(id="label-head")
            yield Static(id="label-code")
            yield Static(id="label-decision")
            yield Static(id="label-expectation")
            yield Static(id="label-evaluations")
        yield Static("loading the queue…", id="label-message")
        yield Static(id="label-suggestion")
        yield Static(id="label-pending")
        note = Input(
            placeholder="a note for the next label (enter keeps it, escape drops the edit)",
            id="label-note",
        )
        note.display = False  # until `n`; not left to the .tcss, which a default screen skips
        yield note
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#label-expectation", Static).border_title = "expectation"
        self.query_one("#label-evaluations", Static).border_title = "evaluations"
        self.show()
        self.start("loading")
        self.load_first()
        self.count_training()

    @property
    def current(self) -> QueueItem | None:
        return self.items[0] if self.items else None

    # -- store work (thread workers) ----------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="label-store",
          name="loading the queue")  # fmt: skip
    def load_first(self) -> None:
        page = load_queue_page(self.store, session_id=self.session_id)
        self.app.call_from_thread(self.replace_window, page)

    @work(thread=True, exclusive=True, exit_on_error=False, group="label-store",
          name="saving the label")  # fmt: skip
    def write_label(
        self,
        item: QueueItem,
        target_id: int,
        value: LabelValue,
        scope: LabelScope,
        note: str | None,
    ) -> None:
        given = self.labeller.write(target_id, value, item, scope=scope, note=note)
        self.app.call_from_thread(self.record_given, given)
        # A path label may cover later items too: the queue is read again past this one.
        page = load_queue_page(self.store, after=item.key, session_id=self.session_id)
        self.app.call_from_thread(self.replace_window, page)

    @work(thread=True, exclusive=True, exit_on_error=False, group="label-store",
          name="undoing the label")  # fmt: skip
    def retract(self, given: Given[QueueItem]) -> None:
        warning = self.labeller.take_back(given)
        if warning is not None:
            self.app.call_from_thread(self.notify, warning, severity="warning")
        self.app.call_from_thread(self.forget_given, given)
        page = load_queue_page(
            self.store, after=through(given.context.key), session_id=self.session_id
        )
        self.app.call_from_thread(self.replace_window, page)

    @work(thread=True, exclusive=True, exit_on_error=False, group="label-more",
          name="loading more of the queue")  # fmt: skip
    def load_more(self, after: QueueKey, window: int) -> None:
        page = load_queue_page(self.store, after=after, session_id=self.session_id, count=False)
        self.app.call_from_thread(self.extend_window, page, window)

    @work(thread=True, exclusive=True, exit_on_error=False, group="label-counts",
          name="counting training data")  # fmt: skip
    def count_training(self) -> None:
        """The first count reads the whole store, a session at a time; later ones only
        the sessions touched since (the labelled one, and any the agent wrote to)."""
        worker = get_current_worker()
        counts = self.tally.refresh(self.store, should_stop=lambda: worker.is_cancelled)
        if counts is not None:
            automatic = self.store.count_automatic_labels()
            self.app.call_from_thread(self.show_counts, counts, automatic)

    @on(Worker.StateChanged)
    def worker_failed(self, event: Worker.StateChanged) -> None:
        if event.state is not WorkerState.ERROR or event.worker.error is None:
            return
        if event.worker.group == "label-store":
            self.busy = False
            self.count_if_needed()
        elif event.worker.group == "label-more":
            self.loading_more = False
        # Database errors carry the SQL and its parameters: the first line says enough.
        cause = getattr(event.worker.error, "orig", None) or event.worker.error
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        self.notify(
            f"{event.worker.name} failed: {reason}", severity="error", timeout=10, markup=False
        )
        self.show()

    # -- results, back on the UI thread -------------------------------------------------

    def replace_window(self, page: QueuePage) -> None:
        self.window += 1
        self.items = list(page.items)
        self.more = page.more
        self.tail = page.items[-1].key if page.items else None
        self.left = page.left
        self.loaded = True
        self.loading_more = False
        self.busy = False
        self.show()
        self.count_if_needed()

    def start(self, doing: str) -> None:
        """Hold the queue's keys while a store worker changes the window."""
        self.doing = doing
        self.busy = True

    def count_if_needed(self) -> None:
        # After the page, not with it: both are CPU-bound threads and the page comes first.
        if self.recount:
            self.recount = False
            self.count_training()

    def extend_window(self, page: QueuePage, window: int) -> None:
        self.loading_more = False
        if window != self.window:
            return
        held = {item.node.id for item in self.items}
        self.items.extend(item for item in page.items if item.node.id not in held)
        self.more = page.more
        if page.items:
            self.tail = page.items[-1].key
        self.show()

    def record_given(self, given: Given[QueueItem]) -> None:
        """The label is stored: move on at once (the fresh page follows)."""
        self.labeller.record(given)
        if self.items and self.items[0].node.id == given.context.node.id:
            self.items.pop(0)
            if self.left:
                self.left -= 1
        self.note = None
        self.scope = LabelScope.BLOCK
        self.recount = True
        self.show()

    def forget_given(self, given: Given[QueueItem]) -> None:
        self.labeller.forget(given)
        self.items.insert(0, given.context)
        if self.left is not None:
            self.left += 1
        self.recount = True
        self.show()

    def show_counts(self, counts: Counts, automatic: int | None = None) -> None:
        self.counts = counts
        self.automatic = automatic
        self.show_counters()

    # -- actions ------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        item = self.current
        if action in ("good", "bad", "skip"):
            if item is None:
                return False
            return None if self.busy else True
        if action == "confirm":
            if item is None or item.suggestion is None:
                return False
            return None if self.busy else True
        if action == "undo":
            if not self.labeller.given:
                return False
            return None if self.busy else True
        if action in ("note", "toggle_scope"):
            # Both are for the next label: not while one is still being saved.
            if item is None:
                return False
            return None if self.busy else True
        if action == "similar":
            if not self.labeller.given or self.memory is None:
                return False
            return None if self.busy else True
        if action in ("train", "jobs"):
            # The console trains; the screen on its own (in a test host) does not.
            return hasattr(self.app, f"action_{action}")
        if action == "back":
            # Leaving would cancel a label not yet written: wait for it (a locked store
            # fails within its busy timeout, and the failure frees the key again).
            return None if self.saving else True
        return True

    def action_good(self) -> None:
        self.give(LabelValue.GOOD)

    def action_bad(self) -> None:
        self.give(LabelValue.BAD)

    def action_confirm(self) -> None:
        item = self.current
        if item is not None and item.suggestion is not None:
            self.give(item.suggestion.value)

    def give(self, value: LabelValue) -> None:
        item = self.current
        if item is None or self.busy:
            return
        target = item.node.id if self.scope is LabelScope.BLOCK else item.path_target_id
        self.start("saving")
        self.write_label(item, target, value, self.scope, self.note)

    def action_skip(self) -> None:
        if self.busy or not self.items:
            return
        self.items.pop(0)
        self.skipped += 1
        if self.left:
            self.left -= 1
        self.show()

    def action_undo(self) -> None:
        if self.busy or not self.labeller.given:
            return
        self.start("undoing")
        self.retract(self.labeller.given[-1])

    def action_note(self) -> None:
        if self.current is None or self.busy:
            return
        note = self.query_one("#label-note", Input)
        note.value = self.note or ""
        note.display = True
        note.focus()

    @on(Input.Submitted, "#label-note")
    def note_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.note = event.value.strip() or None
        self.close_note()

    def close_note(self) -> None:
        self.query_one("#label-note", Input).display = False
        self.query_one("#label-body", VerticalScroll).focus()
        self.show_pending()

    def action_toggle_scope(self) -> None:
        if self.current is not None and not self.busy:
            self.scope = LabelScope.PATH if self.scope is LabelScope.BLOCK else LabelScope.BLOCK

    def watch_scope(self) -> None:
        self.show_pending()

    def watch_busy(self) -> None:
        self.show_counters()

    @property
    def saving(self) -> bool:
        return self.busy and self.doing != "loading"

    @property
    def memory(self) -> SharedMemory | None:
        """The console's retrieval memory; the screen on its own (in a test host) has none."""
        bench = getattr(self.app, "workbench", None)
        return bench.memory if isinstance(bench, Workbench) else None

    def action_similar(self) -> None:
        from app.screens.similar import SimilarScreen

        memory = self.memory
        if self.busy or not self.labeller.given or memory is None:
            return
        screen = SimilarScreen(self.store, memory, self.labeller.given[-1].label)
        self.app.push_screen(screen, self.labelled_alike)

    def labelled_alike(self, count: int | None) -> None:
        """Back from the similar-branches screen: some queue items may be labelled now."""
        if not count:
            return
        self.alike += count
        self.recount = True
        item = self.current
        if item is None:
            self.show()
            self.count_if_needed()
            return
        self.start("loading")
        self.reload_window(item.key)

    @work(thread=True, exclusive=True, exit_on_error=False, group="label-store",
          name="loading the queue")  # fmt: skip
    def reload_window(self, first: QueueKey) -> None:
        page = load_queue_page(self.store, after=through(first), session_id=self.session_id)
        self.app.call_from_thread(self.replace_window, page)

    def action_train(self, kind: str = "sft") -> None:
        train = getattr(self.app, "action_train", None)
        if train is not None:
            train(kind)

    def action_jobs(self) -> None:
        jobs = getattr(self.app, "action_jobs", None)
        if jobs is not None:
            jobs()

    def action_back(self) -> None:
        if self.saving:
            return
        if self.query_one("#label-note", Input).display:
            self.close_note()
        elif len(self.app.screen_stack) > 1:
            self.dismiss(None)
        else:
            self.app.exit()

    # -- showing ------------------------------------------------------------------------

    def show(self) -> None:
        """Everything on screen from the state: the current item, or why there is none."""
        if not self.is_attached:
            return  # left while a worker was finishing: nothing to draw on
        if self.more and not self.loading_more and len(self.items) <= LOW_WATER and self.tail:
            self.loading_more = True
            self.load_more(self.tail, self.window)
        item = self.current
        self.query_one("#label-body").display = item is not None
        self.query_one("#label-suggestion").display = item is not None
        self.query_one("#label-pending").display = item is not None
        message = self.query_one("#label-message", Static)
        message.display = item is None
        if item is None:
            waiting = not self.loaded or self.more
            message.update(Text("loading the queue…" if waiting else self.empty_text()))
        else:
            self.show_item(item)
        self.show_counters()
        # The footer rebuilds its keys on every refresh: only when what applies changed.
        offered = tuple(self.check_action(action, ()) for action in QUEUE_ACTIONS)
        if offered != self.offered:
            self.offered = offered
            self.refresh_bindings()

    def empty_text(self) -> str:
        text = EMPTY
        if self.skipped:
            text += f" ({self.skipped} skipped: open the label screen again to see them)"
        return text

    def show_counters(self) -> None:
        if not self.is_attached:
            return

        def figure(value: int | None) -> str:
            return "…" if value is None else f"{value:,}"

        counts = self.counts
        text = Text.assemble(
            ("labelled ", "dim"),
            (f"{len(self.labeller.given) + self.alike:,}", "bold"),
            *(
                (("  ·  ⚙ by the checks ", "dim"), (f"{self.automatic:,}", "bold"))
                if self.automatic
                else ()
            ),
            ("  ·  left ", "dim"),
            (figure(self.left), "bold"),
            ("  ·  SFT examples ", "dim"),
            (figure(counts.sft_examples if counts else None), "bold"),
            ("  ·  DPO pairs ", "dim"),
            (figure(counts.dpo_pairs if counts else None), "bold"),
        )
        if self.busy:
            text.append(f"  ·  {self.doing}…", style="italic")
        self.query_one("#label-counters", Static).update(text)

    def show_item(self, item: QueueItem) -> None:
        node = item.node
        self.query_one("#label-head", Static).update(head_text(item))
        self.query_one("#label-code", Static).update(code_view(node.text))
        self.query_one("#label-decision", Static).update(decision_text(item))
        expectation = self.query_one("#label-expectation", Static)
        expectation.border_title = expectation_title(item)
        expectation.update(
            Text(escape_controls(item.expectation.text))
            if item.expectation is not None and item.expectation.text.strip()
            else Text("no expectation was written this tick", style="dim italic")
        )
        evaluations = self.query_one("#label-evaluations", Static)
        evaluations.border_title = f"evaluations of tick {node.tick}"
        evaluations.update(evaluations_text(item.evaluations))
        suggestion = self.query_one("#label-suggestion", Static)
        suggestion.set_class(item.suggestion is not None, "-suggested")
        if item.suggestion is None:
            suggestion.update(Text("no suggestion: the evidence is mixed or missing", style="dim"))
        else:
            value = item.suggestion.value
            suggestion.update(
                Text.assemble(
                    ("suggested: ", "dim"),
                    (value.value, "bold green" if value is LabelValue.GOOD else "bold red"),
                    f" — {item.suggestion.reason}",
                    ("  (enter gives it)", "dim"),
                )
            )
        self.query_one("#label-body", VerticalScroll).scroll_home(animate=False)
        self.show_pending()

    def show_pending(self) -> None:
        item = self.current
        if item is None:
            return
        text = Text.assemble(("scope: ", "dim"), SCOPE_WORDS[self.scope])
        if self.scope is LabelScope.PATH:
            text.append(f" (labels block #{item.path_target_id})", style="dim")
        if self.note:
            text.append("  ·  note: ", style="dim")
            text.append(self.note, style="italic")
        self.query_one("#label-pending", Static).update(text)


# -- rendering helpers ---------------------------------------------------------------------


def head_text(item: QueueItem) -> Text:
    node = item.node
    text = Text.assemble(
        (f"session #{node.session_id} ", "bold"),
        item.session_title,
        ("  ·  ", "dim"),
        f"tick {node.tick}",
        ("  ·  ", "dim"),
        f"action #{node.id}",
        ("  ·  ", "dim"),
        (node.status.value, STATUS_STYLES.get(node.status, "")),
        ("  ·  ", "dim"),
    )
    text.append("not scored" if node.score is None else f"score {node.score:+.2f}")
    if node.author is Author.OPERATOR:
        text.append("  ·  written by the operator", style="italic")
    if item.automatic is not None:
        # A mark in words and a sign, not a colour: the checks labelled it, not a person.
        text.append("  ·  ", style="dim")
        text.append(f"⚙ checks said {item.automatic.value.value}", style="bold reverse")
    return text


def code_view(code: str) -> RenderableType:
    code = escape_controls(code).rstrip("\n")
    head = code[:VIEW_MAX_CHARS]
    lines = head.splitlines()
    if len(lines) > VIEW_MAX_LINES:
        head = "\n".join(lines[:VIEW_MAX_LINES])
    syntax = Syntax(head, "python", line_numbers=True, word_wrap=True, theme="ansi_dark")
    if len(head) >= len(code):
        return syntax
    note = Text(f"[showing {len(head):,} of {len(code):,} characters]", style="dim italic")
    return Group(syntax, note)


def decision_text(item: QueueItem) -> Text:
    decision = item.decision
    if decision is None:
        return Text("no decision", style="dim")
    verdict = decision.verdict.value.replace("_", " ")
    text = Text.assemble(
        ("decision: ", "dim"), (verdict, "bold"), f" by the {decision.actor.value}"
    )
    if decision.reason:
        text.append(f" — {decision.reason}")
    if decision.result_node_id is not None:
        text.append(f" (→ #{decision.result_node_id})", style="dim")
    return text


def expectation_title(item: QueueItem) -> str:
    expectation: Node | None = item.expectation
    if expectation is None or expectation.parent_id == item.node.id:
        return "expectation"
    return f"expectation of #{expectation.parent_id}, which went on in its place"


def evaluations_text(results: Iterable[EvaluationResult]) -> Text:
    text = Text()
    for result in results:
        name = escape_controls(result.name)
        if text:
            text.append("\n")
        if result.error is not None:
            text.append("! ", style="bold red")
            text.append(name, style="bold")
            text.append(f"  error: {one_line(result.error)}", style="red")
        elif evaluation_passed(result):
            text.append("✔ ", style="bold green")
            text.append(name, style="bold")
            text.append(f"  {one_line(repr(result.result))}", style="dim")
        else:
            mark = "✘ " if evaluation_failed(result) else "? "
            text.append(mark, style="bold red" if mark == "✘ " else "bold")
            text.append(name, style="bold")
            text.append(f"  {one_line(repr(result.result))}", style="dim")
    return text or Text("no evaluation callbacks ran this tick", style="dim italic")
