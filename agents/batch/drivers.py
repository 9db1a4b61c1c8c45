"""Running a batch: stored first, then its workers as threads of this process
(`run_local`) or as Ray tasks on a cluster (`run_ray`), watched through the store and
stopped together."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.batch.results import BatchProgress, progress_of
from agents.batch.tasks_file import read_tasks
from agents.batch.worker import BatchStopped, WorkerContext, worker_loop, worker_name
from agents.runtime import RunOptions
from agents.tasks.suites import is_suite_ref, select
from storage import (
    Batch,
    BatchStatus,
    BatchTaskStatus,
    TraceStore,
)

if TYPE_CHECKING:
    from agents.settings import Settings

log = logging.getLogger(__name__)


APPROVALS = ("auto", "evaluated", "deny")


#: Seconds between two looks at the store for progress.
POLL_SECONDS = 0.5


def start_batch(
    store: TraceStore,
    tasks_file: str | Path,
    config: Mapping[str, Any],
    read: tuple[list[dict[str, Any]], str] | None = None,
) -> Batch:
    """Store a batch of the file's tasks, all pending (`read`: what `read_tasks` gave, when
    the file was read already)."""
    specs, digest = read if read is not None else read_tasks(tasks_file)
    path = Path(tasks_file)
    name, source = path.name, str(path.resolve())
    if is_suite_ref(str(tasks_file)):
        name = source = select(str(tasks_file)).spec
    return store.create_batch(
        specs, name=name, source=source, source_hash=digest, config=dict(config)
    )


def _watch(
    store: TraceStore,
    batch_id: int,
    alive: Callable[[], bool],
    on_progress: Callable[[BatchProgress], None] | None,
) -> None:
    since = time.monotonic()
    before = sum(int(t.result.get("tokens", 0)) for t in store.batch_tasks(batch_id))
    while alive():
        if on_progress is not None:
            on_progress(progress_of(store, batch_id, since, before))
        time.sleep(POLL_SECONDS)
    if on_progress is not None:
        on_progress(progress_of(store, batch_id, since, before))


def _finish(store: TraceStore, batch_id: int, stopped: bool) -> Batch:
    store.abort_running_batch_tasks(batch_id)
    counts = store.batch_counts(batch_id)
    left = counts[BatchTaskStatus.PENDING] + counts[BatchTaskStatus.ABORTED]
    status = BatchStatus.ABORTED if (stopped or left) else BatchStatus.COMPLETED
    return store.set_batch_status(batch_id, status)


def run_local(
    context: WorkerContext,
    batch_id: int,
    workers: int,
    on_progress: Callable[[BatchProgress], None] | None = None,
) -> Batch:
    """Run the batch's open tasks with `workers` threads sharing the context's backend.
    Ctrl-C (KeyboardInterrupt) stops every session; the batch is then aborted, resumable.
    Raises `BatchStopped` when it could not go on."""
    store = context.store
    store.abort_running_batch_tasks(batch_id)  # a run before this one was killed
    store.set_batch_status(batch_id, BatchStatus.RUNNING)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            worker_loop(context, batch_id, worker_name(index))
        except BaseException as exc:  # reported by the driver
            errors.append(exc)
            context.stop_all()

    threads = [
        threading.Thread(target=work, args=(i,), name=f"batch-worker-{i}", daemon=True)
        for i in range(workers)
    ]
    for thread in threads:
        thread.start()
    stopped = False
    try:
        _watch(store, batch_id, lambda: any(t.is_alive() for t in threads), on_progress)
    except KeyboardInterrupt:
        stopped = True
        context.stop_all()
        for thread in threads:
            thread.join()
    batch = _finish(store, batch_id, stopped or context.stop.is_set())
    for exc in errors:
        if isinstance(exc, BatchStopped):
            raise exc
    if errors:
        raise errors[0]
    return batch


def _ray_worker(
    db: str,
    settings_data: dict[str, Any],
    options_data: dict[str, Any],
    adapter: str | None,
    batch_id: int,
    index: int,
) -> int:
    """One Ray task: its own store connection and backend, then the worker loop."""
    from agents.adapters import use_registered_adapter
    from agents.backends import open_backend
    from agents.settings import Settings

    settings = Settings.model_validate(settings_data)
    options = RunOptions.from_snapshot(options_data)
    with TraceStore(db) as store:
        backend = open_backend(settings)
        try:
            use_registered_adapter(store, backend, adapter)
            context = WorkerContext(store, backend, options, settings.sessions_dir())
            try:
                return worker_loop(context, batch_id, worker_name(index))
            except KeyboardInterrupt:  # ray.cancel while between sessions
                context.stop_all()
                return 0
        finally:
            backend.close()


def run_ray(
    store: TraceStore,
    settings: Settings,
    options: RunOptions,
    batch_id: int,
    workers: int,
    *,
    address: str | None,
    adapter: str | None = None,
    on_progress: Callable[[BatchProgress], None] | None = None,
) -> Batch:
    """Run the batch's open tasks as `workers` Ray tasks on the cluster at `address`
    (None: the Ray this process already started), every one writing to the store."""
    import ray

    connect_ray(address)
    store.abort_running_batch_tasks(batch_id)
    store.set_batch_status(batch_id, BatchStatus.RUNNING)
    remote = ray.remote(max_retries=0)(_ray_worker)
    settings_data = settings.model_dump(mode="json")
    options_data = options.snapshot()
    refs = [
        remote.remote(store.url, settings_data, options_data, adapter, batch_id, i)
        for i in range(workers)
    ]
    pending = list(refs)

    def alive() -> bool:
        nonlocal pending
        if pending:
            _, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
        return bool(pending)

    stopped = False
    error: BaseException | None = None
    try:
        _watch(store, batch_id, alive, on_progress)
        ray.get(refs)
    except KeyboardInterrupt:
        stopped = True
        for ref in refs:
            ray.cancel(ref)
        _drain(ray, refs)
    except Exception as exc:  # a worker raised: BatchStopped, or a bug
        error = _unwrap(exc)
        for ref in refs:
            ray.cancel(ref)
        _drain(ray, refs)
    batch = _finish(store, batch_id, stopped or error is not None)
    if error is not None:
        raise error
    return batch


def connect_ray(address: str | None) -> None:
    """Join the Ray cluster at `address` (None: the one this process already started, or a
    new local one); `BatchStopped` says why when it cannot."""
    import ray

    if ray.is_initialized():
        return
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BatchStopped(f"cannot join the Ray cluster at {address}: {first}") from None


def _drain(ray: Any, refs: Sequence[Any]) -> None:
    """Wait for cancelled Ray tasks to record their stopped sessions."""
    for ref in refs:
        try:
            ray.get(ref, timeout=60)
        except Exception:  # cancelled, or failed: either way it is over
            log.debug("ray task ended", exc_info=True)


def _unwrap(exc: BaseException) -> BaseException:
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc
