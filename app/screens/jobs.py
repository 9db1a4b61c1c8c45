"""The jobs screen: training jobs with live progress, a loss sparkline and the job's log;
cancel, resume, and load a finished adapter into the running agent.

The worker process and the console share nothing but the store: the worker writes
`job_event` rows (training/jobs.py lists their kinds) and this screen polls them, each
job's events after the last one it has read, in a thread worker. The same poll reaps
jobs whose worker died without a word (SIGKILL, OOM), so they show as failed.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Log, Sparkline, Static
from textual.worker import Worker

from app.actions import JOBS_ACTIONS, bindings, palette
from app.commands import ScreenCommands
from app.dialogs import ConfirmScreen
from app.messages import UseAdapter
from app.shared import report_failure, workbench
from storage import Job, JobEvent, JobStatus

if TYPE_CHECKING:
    from storage.views import JobControl
from training.job_lines import event_line, format_duration, format_rate, progress_line
from training.jobs import (
    ACTIVE,
    FINISHED,
    RESUMABLE,
    JobError,
    cancel_job,
    reap_dead_jobs,
    resume_job,
)

#: How often the jobs and their new events are read (seconds).
POLL_EVERY = 0.5
#: The most jobs the list shows (newest first).
JOB_LIMIT = 200
#: The log pane keeps this many of the selected job's latest event lines.
LOG_LINES = 500
#: A finished job's events are read this many times more, then no longer polled (its
#: worker may write a last event just after its final status).
FINAL_READS = 2
COLUMNS = (
    ("id", "id"),
    ("kind", "kind"),
    ("name", "name"),
    ("status", "status"),
    ("done", "done"),
    ("step", "step"),
    ("loss", "loss"),
    ("tok/s", "rate"),
    ("ETA", "eta"),
)

STATUS_STYLES = {
    JobStatus.QUEUED: "dim",
    JobStatus.RUNNING: "bold cyan",
    JobStatus.COMPLETED: "green",
    JobStatus.FAILED: "bold red",
    JobStatus.CANCELLING: "yellow",
    JobStatus.CANCELLED: "yellow",
}


@dataclass
class JobTrack:
    """What the screen knows of one job: its row, and its events read so far."""

    job: Job
    last_id: int = 0
    #: the latest progress event's data (step, total_steps, loss, ...)
    progress: dict[str, object] | None = None
    losses: list[float] = field(default_factory=list)
    log: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_LINES))
    final_reads: int = 0

    @property
    def complete(self) -> bool:
        return self.final_reads >= FINAL_READS

    def add(self, event: JobEvent) -> str:
        self.last_id = max(self.last_id, event.id)
        if event.kind == "progress":
            self.progress = dict(event.data)
            loss = event.data.get("loss")
            if isinstance(loss, int | float):
                self.losses.append(float(loss))
        line = log_line(event)
        self.log.append(line)
        return line

    def fraction(self) -> float:
        if self.job.status is JobStatus.COMPLETED:
            return 1.0
        data = self.progress or {}
        step, total = _number(data.get("step")), _number(data.get("total_steps"))
        if step is not None and total:
            return min(1.0, step / total)
        return self.job.progress

    def cells(self) -> dict[str, Text | str]:
        job, data = self.job, self.progress or {}
        step, total = _number(data.get("step")), _number(data.get("total_steps"))
        loss = _number(data.get("loss"))
        eta = _number(data.get("eta_seconds")) if job.status is JobStatus.RUNNING else None
        return {
            "id": str(job.id),
            "kind": job.kind.value,
            "name": job.name,
            "status": Text(job.status.value, style=STATUS_STYLES.get(job.status, "")),
            "done": f"{self.fraction():.0%}",
            "step": f"{step:.0f}/{total:.0f}" if step is not None and total else "-",
            "loss": f"{loss:.4f}" if loss is not None else "-",
            "rate": format_rate(_number(data.get("tokens_per_second"))),
            "eta": format_duration(eta) if eta is not None else "-",
        }


def log_line(event: JobEvent) -> str:
    """A progress event as one short line (the summary above has the bar); any other as
    `train logs` prints it."""
    if event.kind != "progress":
        return event_line(event)
    data = event.data
    stamp = time.strftime("%H:%M:%S", time.localtime(event.created_at))
    step, total, loss = data.get("step"), data.get("total_steps"), _number(data.get("loss"))
    text = f"{stamp} step {step}/{total or '?'}"
    if loss is not None:
        text += f" loss {loss:.4f}"
    return text


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


@dataclass(frozen=True, slots=True)
class JobsRead:
    """One poll's reading: the jobs, and each polled job's events since the last poll."""

    jobs: list[Job]
    events: dict[int, list[JobEvent]]
    reaped: list[Job]


class JobsCommands(ScreenCommands):
    ENTRIES = palette(JOBS_ACTIONS)


class JobsScreen(Screen[None]):
    """Every training job, newest first; the selected one's progress, loss and log."""

    CSS_PATH = "jobs.tcss"
    COMMANDS: ClassVar = {JobsCommands}
    BINDINGS: ClassVar[list[BindingType]] = bindings(JOBS_ACTIONS)

    #: the highlighted job's id (None while the list is empty)
    selected: reactive[int | None] = reactive(None, init=False, bindings=True)

    def __init__(self, store: JobControl) -> None:
        super().__init__()
        self.store = store
        self.tracks: dict[int, JobTrack] = {}
        self.order: list[int] = []
        self.polling = False
        self.loaded = False
        self.offered: tuple[bool | None, ...] = ()

    def compose(self) -> ComposeResult:
        table: DataTable[Text | str] = DataTable(
            id="jobs-table", cursor_type="row", zebra_stripes=True
        )
        for label, key in COLUMNS:
            table.add_column(label, key=key)
        yield table
        with Horizontal(id="jobs-detail"):
            with Vertical(id="jobs-info"):
                yield Static("reading the jobs…", id="jobs-summary")
                yield Sparkline([], id="jobs-loss")
            yield Log(id="jobs-log", max_lines=LOG_LINES)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#jobs-loss", Sparkline).border_title = "loss"
        self.query_one("#jobs-log", Log).border_title = "log"
        self.query_one("#jobs-table", DataTable).focus()
        self.poll()
        self.set_interval(POLL_EVERY, self.poll)

    # -- reading (thread worker) ------------------------------------------------------------

    def poll(self) -> None:
        if self.polling:
            return  # the last read is still going: the store is slow, don't pile up
        self.polling = True
        last = {
            job_id: track.last_id for job_id, track in self.tracks.items() if not track.complete
        }
        known = set(self.tracks)
        self.read_jobs(last, known)

    @work(thread=True, exclusive=True, exit_on_error=False, group="jobs-poll",
          name="reading the jobs")  # fmt: skip
    def read_jobs(self, last: dict[int, int], known: set[int]) -> None:
        jobs = self.store.list_jobs(limit=JOB_LIMIT)
        # A worker that was killed outright never says so: its pid tells.
        reaped = reap_dead_jobs(self.store, [j for j in jobs if j.status in ACTIVE])
        if reaped:
            jobs = self.store.list_jobs(limit=JOB_LIMIT)
        events = {
            job.id: self.store.job_events(job.id, after_id=last.get(job.id, 0))
            for job in jobs
            if job.id in last or job.id not in known
        }
        self.app.call_from_thread(self.apply_read, JobsRead(jobs, events, reaped))

    @on(Worker.StateChanged)
    def worker_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "jobs-poll" and event.worker.is_finished:
            self.polling = False
        report_failure(self, event)

    # -- showing (UI thread) ----------------------------------------------------------------

    def apply_read(self, read: JobsRead) -> None:
        self.polling = False
        if not self.is_attached:
            return
        fresh: list[str] = []
        for job in read.jobs:
            track = self.tracks.get(job.id)
            if track is None:
                track = self.tracks[job.id] = JobTrack(job)
            track.job = job
            for event in read.events.get(job.id, []):
                line = track.add(event)
                if job.id == self.selected:
                    fresh.append(line)
            if job.status in FINISHED and job.id in read.events:
                track.final_reads += 1
        for job in read.reaped:
            self.notify(
                f"job {job.id} ({job.name}): its worker died; r resumes it",
                severity="warning",
                markup=False,
            )
        self.loaded = True
        self.show_table(read.jobs)
        if fresh:
            self.query_one("#jobs-log", Log).write_lines(fresh)
        self.show_detail()

    def show_table(self, jobs: list[Job]) -> None:
        table: DataTable[Text | str] = self.query_one("#jobs-table", DataTable)
        order = [job.id for job in jobs]
        if order != self.order:
            keep = self.selected
            table.clear()
            for job_id in order:
                cells = self.tracks[job_id].cells()
                table.add_row(*(cells[key] for _, key in COLUMNS), key=str(job_id))
            self.order = order
            if keep in order:
                table.move_cursor(row=order.index(keep), animate=False)
            if order:
                self.select(order[table.cursor_row])
            else:
                self.select(None)
            return
        for job_id in order:
            for key, value in self.tracks[job_id].cells().items():
                table.update_cell(str(job_id), key, value)

    @on(DataTable.RowHighlighted, "#jobs-table")
    def row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value
        self.select(int(key) if key is not None else None)

    def select(self, job_id: int | None) -> None:
        if job_id == self.selected:
            return
        self.selected = job_id
        log = self.query_one("#jobs-log", Log)
        log.clear()
        track = self.tracks.get(job_id) if job_id is not None else None
        if track is not None:
            log.write_lines(list(track.log))
        self.show_detail()

    def show_detail(self) -> None:
        summary = self.query_one("#jobs-summary", Static)
        spark = self.query_one("#jobs-loss", Sparkline)
        track = self.tracks.get(self.selected) if self.selected is not None else None
        if track is None:
            summary.update(
                Text(
                    "no training jobs yet: T on the main or label screen trains on the labels"
                    if self.loaded
                    else "reading the jobs…",
                    style="dim italic",
                )
            )
            spark.data = []
            spark.border_title = "loss"
        else:
            summary.update(job_summary(track))
            spark.data = list(track.losses)
            spark.border_title = loss_title(track.losses)
        # The footer rebuilds its keys on every refresh: only when what applies changed.
        offered = tuple(self.check_action(a, ()) for a in ("cancel", "resume", "load"))
        if offered != self.offered:
            self.offered = offered
            self.refresh_bindings()

    # -- keys -------------------------------------------------------------------------------

    @property
    def selected_job(self) -> Job | None:
        track = self.tracks.get(self.selected) if self.selected is not None else None
        return track.job if track is not None else None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        job = self.selected_job
        if action == "cancel":
            return job is not None and job.status in (JobStatus.QUEUED, JobStatus.RUNNING)
        if action == "resume":
            return job is not None and job.status in RESUMABLE
        if action == "load":
            if job is None or job.status is not JobStatus.COMPLETED:
                return False
            return True if workbench(self).backend is not None else None
        return True

    def action_cancel(self) -> None:
        job = self.selected_job
        if job is None or job.status not in (JobStatus.QUEUED, JobStatus.RUNNING):
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.cancel(job.id)

        self.app.push_screen(
            ConfirmScreen(
                f"Cancel job {job.id} ({job.name})?",
                "The worker saves a checkpoint and stops; r resumes it later.",
            ),
            answered,
        )

    @work(thread=True, exit_on_error=False, group="jobs-change", name="cancelling the job")
    def cancel(self, job_id: int) -> None:
        try:
            job = cancel_job(self.store, job_id)
        except JobError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error", markup=False)
            return
        self.app.call_from_thread(
            self.notify, f"job {job.id} ({job.name}): {job.status.value}", markup=False
        )
        self.app.call_from_thread(self.poll)

    def action_resume(self) -> None:
        job = self.selected_job
        if job is not None and job.status in RESUMABLE:
            self.resume(job.id)

    @work(thread=True, exit_on_error=False, group="jobs-change", name="resuming the job")
    def resume(self, job_id: int) -> None:
        try:
            job = resume_job(self.store, job_id)
        except JobError as exc:
            self.app.call_from_thread(self.notify, str(exc), severity="error", markup=False)
            return
        self.app.call_from_thread(
            self.notify, f"job {job.id} ({job.name}): {job.status.value} again", markup=False
        )
        self.app.call_from_thread(self.poll)

    def action_load(self) -> None:
        job = self.selected_job
        if job is None or job.status is not JobStatus.COMPLETED:
            return
        self.post_message(UseAdapter(job.name))

    def action_back(self) -> None:
        self.dismiss(None)


def number(value: object) -> str:
    """A setting as the operator typed it: 2 epochs, not 2.0."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def job_summary(track: JobTrack) -> Text:
    job = track.job
    text = Text.assemble(
        (f"job {job.id}", "bold"),
        ("  ·  ", "dim"),
        job.kind.value.upper(),
        ("  ·  ", "dim"),
        (job.name, "bold"),
        ("  ·  ", "dim"),
        (job.status.value, STATUS_STYLES.get(job.status, "")),
    )
    text.append(f"\nbase {job.base_model or '?'}", style="dim")
    config = job.config
    options = [
        f"{key} {number(config[key])}"
        for key in ("epochs", "learning_rate", "lora_r")
        if config.get(key) is not None
    ]
    if options:
        text.append("  ·  " + ", ".join(options), style="dim")
    if track.progress is not None:
        text.append("\n" + progress_line(track.progress))
    elif job.status in ACTIVE:
        text.append("\nwaiting for the first step…", style="italic")
    started, finished = job.started_at, job.finished_at
    if started is not None:
        took = (finished or time.time()) - started
        text.append(f"\nran {format_duration(took)}", style="dim")
    if job.error:
        text.append(f"\n{job.error}", style="red")
    if job.status is JobStatus.COMPLETED:
        text.append(f"\nadapter {job.name} is registered: l loads it into the agent")
    elif job.status in RESUMABLE:
        text.append("\nr resumes it from its last checkpoint", style="dim")
    return text


def loss_title(losses: list[float]) -> str:
    if not losses:
        return "loss"
    return f"loss  {losses[0]:.3f} → {losses[-1]:.3f}  ({len(losses)} steps)"
