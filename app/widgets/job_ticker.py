"""The status bar's training job: read every JOBS_EVERY seconds once the store is open,
in a thread worker; each job's end told once (`app.job_watch`)."""

from __future__ import annotations

from textual import on, work
from textual.widget import Widget
from textual.worker import Worker

from app.job_watch import JobWatch, ending_note, status_line
from app.shared import report_failure, workbench
from app.widgets.status_bar import StatusBar

#: How often the status bar's training job is read (seconds).
JOBS_EVERY = 1.0


class JobTicker(Widget):
    DEFAULT_CSS = "JobTicker { display: none; }"

    def __init__(self) -> None:
        super().__init__(id="job-ticker")
        #: the training jobs seen running, to tell each one's end once
        self.job_watch = JobWatch()

    def start(self) -> None:
        """The store is open: read the jobs now and every JOBS_EVERY seconds."""
        self.set_interval(JOBS_EVERY, self.load_jobs)
        self.load_jobs()

    @work(thread=True, exclusive=True, exit_on_error=False, group="jobs")
    def load_jobs(self) -> None:
        store = workbench(self).store
        text = status_line(store)
        self.app.call_from_thread(setattr, self.screen.query_one(StatusBar), "job", text)
        for job in self.job_watch.ended(store):
            note, severity = ending_note(job)
            self.app.call_from_thread(self.notify, note, severity=severity, markup=False)

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        # Worker.StateChanged does not bubble: the app's reporter sees only its own workers.
        report_failure(self, event)
