"""What a training job says to the store and to its log, and whether it was asked to stop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from storage import JobStatus

if TYPE_CHECKING:
    from storage.views import JobWrites


class Reporter:
    """What the job says to the store, and to its log (stdout: worker.log). Only the main
    process of a multi-GPU run writes to the store; every process logs."""

    def __init__(self, store: JobWrites, job_id: int, *, main: bool = True) -> None:
        self.store = store
        self.job_id = job_id
        self.main = main

    def log(self, message: str, **data: Any) -> None:
        print(message, flush=True)
        if self.main:
            self.store.add_job_event(self.job_id, "log", message=message, data=data or None)

    def event(
        self, kind: str, *, message: str | None = None, step: int | None = None, **data: Any
    ) -> None:
        if message:
            print(f"{kind}: {message}", flush=True)
        if self.main:
            self.store.add_job_event(
                self.job_id, kind, message=message, step=step, data=data or None
            )

    def update(self, **changes: Any) -> None:
        if self.main:
            self.store.update_job(self.job_id, **changes)


def cancel_requested(store: JobWrites, job_id: int, baseline_event: int) -> bool:
    """Status `cancelling`, or a `cancel` event written since this worker started (a
    cancel that raced the worker's own `running`)."""
    job = store.get_job(job_id)
    if job.status is JobStatus.CANCELLING:
        return True
    return bool(store.job_events(job_id, after_id=baseline_event, kind="cancel", limit=1))
