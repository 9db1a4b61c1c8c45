"""Batch rollouts: one headless session per task, many at a time, on this machine or as
Ray tasks on a cluster.

A batch is stored before anything runs: a `batch` row and one `batch_task` row per line of
the tasks file. Workers *pull*: each takes up the next open task with an atomic claim in
the store (`TraceStore.claim_batch_task`), runs it to its end, records how it went, and
takes up the next. So nothing schedules but the store, a task is never run by two workers,
and the same loop runs as N threads of this process (`run_local`) or as N Ray tasks on a
cluster sharing a PostgreSQL store (`run_ray`). The progress the driver shows is read
from the store too.

Stopping (Ctrl-C) stops every running session at once (`Runtime.stop`); those tasks are
marked aborted, with their sessions. `resume` takes them up again: an aborted task
continues its own session (the runtime's resume), a pending one starts a new session, so
every task ends with exactly one session.

The model is shared: the workers of one process share one backend (a vLLM server batches
their requests; the in-process backends serialise them), and Ray workers each connect to
the server named by the settings.

The parts: `tasks_file` (reading the tasks), `worker` (one worker's loop), `drivers`
(running a batch here or on Ray), `results` (progress and summaries).
"""

from agents.batch.drivers import (
    APPROVALS,
    POLL_SECONDS,
    BatchStopped,
    connect_ray,
    run_local,
    run_ray,
    start_batch,
)
from agents.batch.results import (
    BatchProgress,
    Summary,
    by_adapter,
    describe_counts,
    progress_of,
    summarize,
    wilson,
)
from agents.batch.tasks_file import (
    MAX_TASKS_FILE_BYTES,
    SPEC_KEYS,
    TasksFileError,
    read_tasks,
    spec_name,
    suite_tasks,
    task_of,
)
from agents.batch.worker import (
    WorkerContext,
    run_task,
    session_reward,
    ticks_done,
    worker_loop,
    worker_name,
)

__all__ = [
    "APPROVALS",
    "MAX_TASKS_FILE_BYTES",
    "POLL_SECONDS",
    "SPEC_KEYS",
    "BatchProgress",
    "BatchStopped",
    "Summary",
    "TasksFileError",
    "WorkerContext",
    "by_adapter",
    "connect_ray",
    "describe_counts",
    "progress_of",
    "read_tasks",
    "run_local",
    "run_ray",
    "run_task",
    "session_reward",
    "spec_name",
    "start_batch",
    "suite_tasks",
    "summarize",
    "task_of",
    "ticks_done",
    "wilson",
    "worker_loop",
    "worker_name",
]
