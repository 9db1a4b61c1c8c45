"""The confirm dialog before training: what the labels make now, the base model, the
adapter's name, and the options; confirming queues the job.

The counts are taken in a thread worker (they read the whole store). The job is queued
through `training.jobs.queue_job`, which starts a detached `python -m training.worker`
process: nothing trains in the console's process, and the job goes on if the console
closes. The dialog is dismissed with the queued `Job`, or None when left.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.reactive import reactive
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, RadioButton, RadioSet, Static
from textual.worker import Worker, WorkerState

from app.actions import TRAIN_CONFIRM_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from app.shared import report_failure
from storage import Job, JobKind
from training.jobs import DEFAULT_LR, JobError, JobOptions, needed_labels_message, queue_job
from training.rules import Counts

if TYPE_CHECKING:
    from storage import TraceStore

KIND_HELP = {
    JobKind.SFT: "SFT: learn to write the blocks the labels call good",
    JobKind.DPO: "DPO: prefer the preferred sibling over the other",
    JobKind.KTO: "KTO: good and bad blocks, paired or not",
}
DEFAULT_EPOCHS = 3.0
DEFAULT_LORA_R = 16


class TrainCommands(ScreenCommands):
    ENTRIES = palette(TRAIN_CONFIRM_ACTIONS)


class TrainConfirmScreen(ModalScreen[Job | None]):
    """Confirm (and adjust) a training job on the current labels."""

    CSS_PATH = "train_confirm.tcss"
    COMMANDS: ClassVar = {TrainCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(TRAIN_CONFIRM_ACTIONS)

    kind: reactive[JobKind] = reactive(JobKind.SFT, init=False, bindings=True)
    counts: reactive[Counts | None] = reactive(None, init=False, bindings=True)
    queueing: reactive[bool] = reactive(False, init=False, bindings=True)

    def __init__(
        self,
        store: TraceStore,
        *,
        kind: JobKind | str = JobKind.SFT,
        base_model: str,
        data_dir: Path,
    ) -> None:
        super().__init__()
        self.store = store
        self.set_reactive(TrainConfirmScreen.kind, JobKind(kind))
        self.base_model = base_model
        self.data_dir = data_dir
        #: the id the next job will probably get, for the default name's preview
        self.next_id: int | None = None
        #: (good, bad) KTO examples, counted with the rest
        self.kto_counts: tuple[int, int] = (0, 0)

    def compose(self) -> ComposeResult:
        # The dialog scrolls in a short terminal; why the job cannot be queued and the
        # buttons are docked under the form, so they stay in view.
        with VerticalScroll(id="train-dialog") as dialog:
            dialog.border_title = "Train an adapter on the labels"
            with Vertical(id="train-foot"):
                yield Static(id="train-problem")
                with Horizontal(id="train-buttons"):
                    yield Button("Queue job", id="train-queue", variant="primary", compact=True)
                    yield Button("Cancel", id="train-cancel", compact=True)
            yield Static("counting what the labels make…", id="train-counts")
            with RadioSet(id="train-kind"):
                for kind in JobKind:
                    yield RadioButton(
                        KIND_HELP[kind], value=kind is self.kind, id=f"train-kind-{kind.value}"
                    )
            with Horizontal(classes="train-row"):
                yield Label("base model", classes="train-label")
                yield Input(self.base_model, id="train-base")
            with Horizontal(classes="train-row"):
                yield Label("adapter name", classes="train-label")
                yield Input(id="train-name", restrict=r"[A-Za-z0-9._-]*", max_length=100)
            with Horizontal(classes="train-row"):
                yield Label("epochs", classes="train-label")
                yield Input(str(DEFAULT_EPOCHS), id="train-epochs", type="number")
            with Horizontal(classes="train-row"):
                yield Label("learning rate", classes="train-label")
                yield Input(id="train-lr")
            with Horizontal(classes="train-row"):
                yield Label("LoRA r", classes="train-label")
                yield Input(str(DEFAULT_LORA_R), id="train-lora-r", type="integer")
        yield Footer()

    def on_mount(self) -> None:
        self.show_kind()
        self.query_one("#train-kind", RadioSet).focus()
        self.count()

    # -- counting (thread worker) --------------------------------------------------------

    @work(thread=True, exclusive=True, exit_on_error=False, group="train-count",
          name="counting training data")  # fmt: skip
    def count(self) -> None:
        from training.rules import count_kto_examples, count_training_data

        counts = count_training_data(self.store)
        self.kto_counts = count_kto_examples(self.store)
        latest = self.store.list_jobs(limit=1)
        next_id = latest[0].id + 1 if latest else 1
        self.app.call_from_thread(self.show_counts, counts, next_id)

    def show_counts(self, counts: Counts, next_id: int) -> None:
        self.next_id = next_id
        self.counts = counts

    def rows(self) -> int | None:
        counts = self.counts
        if counts is None:
            return None
        if self.kind is JobKind.KTO:
            good, bad = self.kto_counts
            return good + bad if good and bad else 0
        return counts.sft_examples if self.kind is JobKind.SFT else counts.dpo_pairs

    # -- showing ---------------------------------------------------------------------------

    def watch_counts(self) -> None:
        self.show_kind()

    def watch_kind(self) -> None:
        self.show_kind()

    def show_kind(self) -> None:
        if not self.is_attached:
            return
        counts = self.counts
        line = self.query_one("#train-counts", Static)
        if counts is None:
            line.update(Text("counting what the labels make…", style="italic"))
        else:
            line.update(
                Text.assemble(
                    "The labels make ",
                    (f"{counts.sft_examples:,}", "bold"),
                    " SFT examples, ",
                    (f"{counts.dpo_pairs:,}", "bold"),
                    " DPO pairs and ",
                    (f"{sum(self.kto_counts):,}", "bold"),
                    " KTO examples now.",
                )
            )
        button = self.query_one(f"#train-kind-{self.kind.value}", RadioButton)
        if not button.value:
            button.value = True
        self.query_one("#train-lr", Input).placeholder = f"{DEFAULT_LR[self.kind]:g}"
        preview = f"{self.kind.value}-{self.next_id}" if self.next_id else f"{self.kind.value}-ID"
        self.query_one("#train-name", Input).placeholder = f"{preview} (the job's id)"
        rows = self.rows()
        if rows == 0:
            self.show_problem(needed_labels_message(self.kind))
        else:
            self.show_problem(None)
        self.show_buttons()

    def watch_queueing(self) -> None:
        self.show_buttons()

    def show_buttons(self) -> None:
        """The queue button is greyed when its key is (`check_action`)."""
        if self.is_attached:
            allowed = self.check_action("confirm", ()) is True
            self.query_one("#train-queue", Button).disabled = not allowed

    def show_problem(self, problem: str | None) -> None:
        widget = self.query_one("#train-problem", Static)
        widget.display = problem is not None
        widget.update(Text(problem or "", style="bold red"))

    # -- keys ------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "confirm":
            rows = self.rows()
            # Greyed while counting or queueing; refused outright with nothing to train on.
            if rows == 0:
                return None
            return None if rows is None or self.queueing else True
        if action in ("toggle_kind", "kind"):
            return None if self.queueing else True
        return True

    @on(RadioSet.Changed, "#train-kind")
    def kind_changed(self, event: RadioSet.Changed) -> None:
        chosen = event.pressed.id or ""
        self.kind = JobKind(chosen.removeprefix("train-kind-"))

    @on(Button.Pressed, "#train-queue")
    def queue_pressed(self) -> None:
        self.action_confirm()

    @on(Button.Pressed, "#train-cancel")
    def cancel_pressed(self) -> None:
        self.action_cancel()

    def action_toggle_kind(self) -> None:
        kinds = list(JobKind)
        self.kind = kinds[(kinds.index(self.kind) + 1) % len(kinds)]

    def action_kind(self, kind: str) -> None:
        self.kind = JobKind(kind)

    @on(Input.Submitted)
    def submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_confirm()

    def options(self) -> JobOptions:
        """The options as typed; JobError (one line) for one that is not valid."""

        def number(selector: str, what: str, kind: type[float] | type[int]) -> float | None:
            raw = self.query_one(selector, Input).value.strip()
            if not raw:
                return None
            try:
                return kind(raw)
            except ValueError:
                raise JobError(f"{what}: {raw!r} is not a number") from None

        epochs = number("#train-epochs", "epochs", float)
        rank = number("#train-lora-r", "LoRA r", int)
        return JobOptions(
            kind=self.kind,
            base_model=self.query_one("#train-base", Input).value.strip(),
            name=self.query_one("#train-name", Input).value.strip() or None,
            epochs=DEFAULT_EPOCHS if epochs is None else epochs,
            learning_rate=number("#train-lr", "learning rate", float),
            lora_r=DEFAULT_LORA_R if rank is None else int(rank),
        )

    def action_confirm(self) -> None:
        rows = self.rows()
        if rows == 0:
            self.notify(needed_labels_message(self.kind), severity="warning", markup=False)
            return
        if rows is None or self.queueing:
            return
        try:
            options = self.options()
        except JobError as exc:
            self.show_problem(str(exc))
            self.notify(str(exc), severity="error", markup=False)
            return
        self.show_problem(None)
        self.queueing = True
        self.queue(options)

    @work(thread=True, exclusive=True, exit_on_error=False, group="train-queue",
          name="queueing the job")  # fmt: skip
    def queue(self, options: JobOptions) -> None:
        try:
            job = queue_job(self.store, options, data_dir=self.data_dir)
        except JobError as exc:
            self.app.call_from_thread(self.refused, str(exc))
            return
        self.app.call_from_thread(self.dismiss, job)

    def refused(self, reason: str) -> None:
        self.queueing = False
        self.show_problem(reason)
        self.notify(reason, severity="error", markup=False)

    @on(Worker.StateChanged)
    def worker_failed(self, event: Worker.StateChanged) -> None:
        if event.state is not WorkerState.ERROR:
            return
        if event.worker.group == "train-queue":
            self.queueing = False
        report_failure(self, event)

    def action_cancel(self) -> None:
        if not self.queueing:
            self.dismiss(None)
