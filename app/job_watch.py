"""Which training jobs ended since the last look, so the console tells each end once,
whichever screen is open (a job trains in a process of its own; only the store says)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage import Job
    from storage.views import Jobs, JobWrites

#: The newest jobs read on each look.
WINDOW = 50


class JobWatch:
    """Remembers the jobs seen queued or running (and the newest job id seen), and on
    each look returns those that have finished since: completed, failed or cancelled.
    Jobs that had finished before the first look are history, not news."""

    def __init__(self) -> None:
        self.active: set[int] = set()
        #: the newest job id seen; None until the first look
        self.newest: int | None = None

    def ended(self, store: Jobs) -> list[Job]:
        """The jobs that finished since the last look, oldest first. Call from a worker
        thread: it reads the store."""
        from storage import NotFoundError
        from training.jobs import ACTIVE, FINISHED

        recent = {job.id: job for job in store.list_jobs(limit=WINDOW)}
        for job_id in self.active - recent.keys():  # pushed out by many newer jobs
            try:
                recent[job_id] = store.get_job(job_id)
            except NotFoundError:
                continue
        newest = self.newest
        ended = [
            job
            for job in recent.values()
            if job.status in FINISHED
            and (job.id in self.active or (newest is not None and job.id > newest))
        ]
        self.active = {job.id for job in recent.values() if job.status in ACTIVE}
        self.newest = max([newest or 0, *recent])
        return sorted(ended, key=lambda job: job.id)


def status_line(store: JobWrites) -> str:
    """The status bar's word on training: the running job and how far it is, else a
    queued one (its worker still loading the model: the operator who just queued it must
    see it), else nothing. A worker killed outright is reaped first, or it would show as
    training forever. Call from a worker thread: it reads the store."""
    from storage import JobStatus
    from training.jobs import reap_dead_jobs

    def active() -> list[Job]:
        return store.list_jobs(status="running", limit=1) or store.list_jobs(
            status="queued", limit=1
        )

    jobs = active()
    if jobs and reap_dead_jobs(store, jobs):
        jobs = active()
    if not jobs:
        return ""
    job = jobs[0]
    if job.status is JobStatus.QUEUED:
        return f"training {job.name} queued"
    return f"training {job.name} {job.progress:.0%}"


def ending_note(job: Job) -> tuple[str, str]:
    """The notification of a job's end, and its severity: a failure stays on screen."""
    from storage import JobStatus

    text = f"job {job.id} ({job.name}): {job.status.value}"
    if job.status is JobStatus.FAILED:
        return (f"{text}: {job.error}" if job.error else text), "error"
    return text, "information"
