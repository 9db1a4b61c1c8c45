"""Batch rollouts: one headless session per task, many at a time, on this machine or as
Ray tasks on a cluster.

A batch is stored before anything runs: a `batch` row and one `batch_task` row per line of
the tasks file. Workers *pull*: each takes up the next open task with an atomic claim in
the store (`TraceStore.claim_batch_task`), runs it to its end, records how it went, and
takes up the next. So nothing schedules but the store, a task is never run by two workers,
and the same loop runs as N threads of this process (`run_local`) or as N Ray tasks on a
cluster sharing a PostgreSQL store (`run_ray`). The progress the driver shows is read
from the store too.

Stopping (Ctrl-C) stops every running session at its next block boundary; those tasks are
marked aborted, with their sessions. `resume` takes them up again: an aborted task
continues its own session (the runtime's resume), a pending one starts a new session, so
every task ends with exactly one session.

The model is shared: the workers of one process share one backend (a vLLM server batches
their requests; the in-process backends serialise them), and Ray workers each connect to
the server named by the settings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.events import RuntimeEvent
from agents.families import FAMILIES, parse_seeds, split
from agents.runtime import RunOptions, Runtime, task_from_snapshot
from agents.sandbox import SandboxUnavailable
from agents.suites import absolute_ref, is_suite_ref, select, short_name
from agents.tasks import TASK_SUFFIXES, Task, TaskError, load_task, prompt_task
from agents.user_files import read_user_file
from storage import (
    Batch,
    BatchStatus,
    BatchTask,
    BatchTaskStatus,
    NodeStatus,
    SessionStatus,
    TraceStore,
)

if TYPE_CHECKING:
    from agents.backends import Backend
    from agents.settings import Settings

log = logging.getLogger(__name__)

#: What a line of the tasks file may hold.
SPEC_KEYS = {
    "task": "a shipped task's name, family:NAME:SEED, a benchmark's problem (humaneval:12, "
    "jsonl:PATH:TASK_ID), or a task file (.toml or .py; relative to the tasks file)",
    "family": 'a task family: one task per seed of "seeds"',
    "seeds": 'the family\'s seeds, such as "0-29" or "3,5,8", or its "held-out" or "teaching" set',
    "prompt": "the task as free text",
    "id": "your name for the task (shown in the results)",
    "message": "a first message from the operator",
    "max_ticks": "the most ticks the session may take",
}
APPROVALS = ("auto", "evaluated", "deny")
_STATUS_OF = {
    SessionStatus.COMPLETED: BatchTaskStatus.COMPLETED,
    SessionStatus.FAILED: BatchTaskStatus.FAILED,
    SessionStatus.TRUNCATED: BatchTaskStatus.TRUNCATED,
    SessionStatus.ABORTED: BatchTaskStatus.ABORTED,
}
#: Seconds between two looks at the store for progress.
POLL_SECONDS = 0.5
#: A tasks file larger than this is refused unread (a line per task, not the data).
MAX_TASKS_FILE_BYTES = 64 << 20


class TasksFileError(ValueError):
    """A tasks file that cannot be run; the message names the line."""


class BatchStopped(Exception):
    """The batch could not go on (no sandbox, the model server failed); resumable."""


# -- the tasks file ------------------------------------------------------------------------


def read_tasks(path: str | Path) -> tuple[list[dict[str, Any]], str]:
    """The task specs of a JSON-lines tasks file, each checked by loading its task, and
    the hash of the file's content. Relative task files are made absolute (workers on
    other machines and later resumes find them)."""
    source = Path(path)
    try:
        data = read_user_file(source, MAX_TASKS_FILE_BYTES, "tasks file")
    except OSError as exc:
        raise TasksFileError(f"{source}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TasksFileError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    specs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{source} line {number}"
        specs.extend(_specs(line, where, source.parent))
    if not specs:
        raise TasksFileError(
            f"{source}: no tasks (one JSON object per line, e.g. "
            '{"task": "vigenere"} or {"prompt": "..."})'
        )
    return specs, hashlib.sha256(data).hexdigest()


def _specs(line: str, where: str, folder: Path) -> list[dict[str, Any]]:
    """The specs of one line: one, or one per seed of a family line."""
    try:
        spec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TasksFileError(f"{where}: not JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(spec, dict):
        raise TasksFileError(f'{where}: expected an object such as {{"task": "vigenere"}}')
    if "family" not in spec and "seeds" not in spec:
        return [_spec(spec, where, folder)]
    family, seeds = spec.pop("family", None), spec.pop("seeds", None)
    if not isinstance(family, str) or not isinstance(seeds, str | int) or isinstance(seeds, bool):
        raise TasksFileError(
            f'{where}: a family line needs "family" (a name) and "seeds" (such as "0-29")'
        )
    if "task" in spec or "prompt" in spec or "id" in spec:
        raise TasksFileError(f'{where}: a family line names no "task", "prompt" or "id"')
    try:
        if seeds in ("teaching", "held-out"):
            if family not in FAMILIES:
                raise ValueError(f"no such task family {family!r}")
            numbers = split(family)[seeds == "held-out"]
        else:
            numbers = parse_seeds(str(seeds))
    except ValueError as exc:
        raise TasksFileError(f"{where}: {exc}") from None
    return [_spec({**spec, "task": f"family:{family}:{seed}"}, where, folder) for seed in numbers]


def _spec(spec: dict[str, Any], where: str, folder: Path) -> dict[str, Any]:
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        known = ", ".join(SPEC_KEYS)
        raise TasksFileError(f"{where}: unknown key {unknown[0]!r} (known: {known})")
    if ("task" in spec) == ("prompt" in spec):
        raise TasksFileError(f'{where}: give either "task" or "prompt"')
    for key in ("task", "prompt", "id", "message"):
        if key in spec and not isinstance(spec[key], str):
            raise TasksFileError(f'{where}: "{key}" must be a string')
    ticks = spec.get("max_ticks")
    if ticks is not None and (not isinstance(ticks, int) or isinstance(ticks, bool) or ticks < 1):
        raise TasksFileError(f'{where}: "max_ticks" must be a whole number from 1')
    ref = spec.get("task")
    if ref is not None and ref.startswith("family:") and ref.count(":") < 2:
        raise TasksFileError(
            f'{where}: name the variant ("{ref}:7") or give a family line '
            '({"family": NAME, "seeds": "0-29"}): a batch runs the same tasks on a resume'
        )
    if ref is not None and is_suite_ref(ref):
        try:
            spec["task"] = absolute_ref(ref, folder)
        except TaskError as exc:
            raise TasksFileError(f"{where}: {exc}") from None
    elif ref is not None and ("/" in ref or "\\" in ref or ref.endswith(TASK_SUFFIXES)):
        # a task file: relative to the tasks file, made absolute for workers and resumes
        given = Path(ref).expanduser()
        spec["task"] = str((given if given.is_absolute() else folder / given).resolve())
    try:
        task_of(spec)
    except TaskError as exc:
        raise TasksFileError(f"{where}: {exc}") from None
    return spec


def task_of(spec: Mapping[str, Any]) -> Task:
    if "task" in spec:
        return load_task(str(spec["task"]))
    return prompt_task(str(spec["prompt"]))


def spec_name(spec: Mapping[str, Any]) -> str:
    """How a task is named in progress and results."""
    if spec.get("id"):
        return str(spec["id"])
    if "task" in spec:
        ref = str(spec["task"])
        if ref.startswith("family:"):
            return ref.removeprefix("family:")
        return short_name(ref) if is_suite_ref(ref) else Path(ref).stem
    prompt = " ".join(str(spec.get("prompt", "")).split())
    return prompt if len(prompt) <= 40 else prompt[:39] + "…"


# -- one worker ----------------------------------------------------------------------------


@dataclass
class WorkerContext:
    """What a worker runs tasks with."""

    store: TraceStore
    backend: Backend
    options: RunOptions
    sessions_dir: Path
    #: set to stop: the worker's running session stops at its next block boundary
    stop: threading.Event = field(default_factory=threading.Event)
    #: the sessions running now, by worker (so a stop reaches them)
    running: dict[str, Runtime] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def stop_all(self) -> None:
        self.stop.set()
        with self.lock:
            runtimes = list(self.running.values())
        for runtime in runtimes:
            runtime.stop()


def worker_name(index: int) -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{index}"


def worker_loop(context: WorkerContext, batch_id: int, worker: str) -> int:
    """Take up the batch's open tasks one after another until none is left or the batch
    stops. Returns how many tasks this worker ran. Raises `BatchStopped` when no task can
    run (the sandbox is unavailable, the model server failed)."""
    ran = 0
    while not context.stop.is_set():
        task = context.store.claim_batch_task(batch_id, worker)
        if task is None:
            break
        ran += 1
        status = run_task(context, task, worker)
        if status is BatchTaskStatus.ABORTED:
            break
    return ran


def run_task(context: WorkerContext, batch_task: BatchTask, worker: str) -> BatchTaskStatus:
    """Run one task to its end and record it; a task whose session was stopped before
    continues that session."""
    store = context.store
    spec = batch_task.spec
    resume = batch_task.session_id
    done_ticks = 0
    if resume is not None and store.count_nodes(resume):
        task = task_from_snapshot(store.get_session(resume).settings.get("task", {}))
        done_ticks = ticks_done(store, resume)
    else:  # new, or stopped before its first block: the task as the file gives it
        task = task_of(spec)
    # a resumed session has the ticks it already ran counted against the task's limit
    options = context.options.within(spec.get("max_ticks") or task.max_ticks, done_ticks)
    recorded = resume

    def listener(event: RuntimeEvent) -> None:
        nonlocal recorded
        if recorded is None and event.session_id:
            recorded = event.session_id
            store.set_batch_task_session(batch_task.id, event.session_id)

    runtime = Runtime(
        store,
        context.backend,
        task,
        options,
        sessions_dir=context.sessions_dir,
        listener=listener,
        resume=resume,
    )
    if spec.get("message") and resume is None:
        runtime.post_message(str(spec["message"]))
    with context.lock:
        context.running[worker] = runtime
    started = time.monotonic()
    try:
        if context.stop.is_set():
            runtime.stop()
        outcome = runtime.run()
    except SandboxUnavailable as exc:
        store.finish_batch_task(batch_task.id, BatchTaskStatus.PENDING)
        context.stop_all()
        raise BatchStopped(f"{exc}. {exc.fix}" if exc.fix else str(exc)) from None
    except ValueError as exc:  # a session to resume with nothing to resume from
        store.finish_batch_task(batch_task.id, BatchTaskStatus.FAILED, error=str(exc))
        return BatchTaskStatus.FAILED
    except Exception as exc:  # a bug: the task fails, the batch goes on
        log.exception("batch task %s failed", batch_task.id)
        error = f"internal error: {type(exc).__name__}: {exc}"
        store.finish_batch_task(batch_task.id, BatchTaskStatus.FAILED, error=error)
        return BatchTaskStatus.FAILED
    finally:
        with context.lock:
            context.running.pop(worker, None)
    passed, total = runtime.task_passed
    result = {
        "ticks": ticks_done(store, outcome.session_id),
        "tokens": outcome.tokens + int(batch_task.result.get("tokens", 0)),
        "checks_passed": passed,
        "checks_total": total,
        "reward": session_reward(store, outcome.session_id),
        "seconds": round(time.monotonic() - started + batch_task.result.get("seconds", 0.0), 3),
        "adapter": context.backend.active_adapter,
    }
    if outcome.backend_error is not None:
        # the server failed, not the agent: the task is resumable once it is back
        store.finish_batch_task(
            batch_task.id, BatchTaskStatus.ABORTED, result=result, error=outcome.reason
        )
        context.stop_all()
        raise BatchStopped(f"the model backend failed: {outcome.backend_error}")
    status = _STATUS_OF.get(outcome.status, BatchTaskStatus.FAILED)
    why = outcome.reason if status is not BatchTaskStatus.COMPLETED else None
    store.finish_batch_task(batch_task.id, status, result=result, error=why)
    return status


def ticks_done(store: TraceStore, session_id: int) -> int:
    """The ticks a session finished (its last outcome block's tick)."""
    ticks = [
        n.tick
        for n in store.tree(session_id)
        if n.kind == "outcome" and n.status is not NodeStatus.ALTERNATE
    ]
    return max(ticks, default=0)


def session_reward(store: TraceStore, session_id: int) -> float:
    """The mean reward of the session's ticks (the outcome blocks on its path; weave-agent's
    reward: half the fraction of evaluations passed, less a tenth per failed attempt)."""
    rewards = [
        float(n.meta["reward"])
        for n in store.tree(session_id)
        if n.kind == "outcome" and n.status is not NodeStatus.ALTERNATE and "reward" in n.meta
    ]
    return round(sum(rewards) / len(rewards), 4) if rewards else 0.0


# -- the driver ----------------------------------------------------------------------------


@dataclass(frozen=True)
class BatchProgress:
    """A batch's state as the store has it."""

    counts: Mapping[BatchTaskStatus, int]
    tokens: int
    seconds: float

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def finished(self) -> int:
        c = self.counts
        return (
            c[BatchTaskStatus.COMPLETED] + c[BatchTaskStatus.FAILED] + c[BatchTaskStatus.TRUNCATED]
        )

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


def progress_of(
    store: TraceStore, batch_id: int, since: float, tokens_before: int
) -> BatchProgress:
    tasks = store.batch_tasks(batch_id)
    counts = dict.fromkeys(BatchTaskStatus, 0)
    for task in tasks:
        counts[task.status] += 1
    tokens = sum(int(t.result.get("tokens", 0)) for t in tasks) - tokens_before
    return BatchProgress(counts, tokens, time.monotonic() - since)


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


def suite_tasks(spec: str) -> tuple[list[dict[str, Any]], str]:
    """The task specs of a suite's selection (`batch --suite`), as `read_tasks` gives a
    file's."""
    try:
        chosen = select(spec)
    except TaskError as exc:
        raise TasksFileError(str(exc)) from None
    return [{"task": ref} for ref in chosen.refs], chosen.digest


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


# -- results -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """How a batch went."""

    batch: Batch
    counts: Mapping[BatchTaskStatus, int]
    #: the mean fraction of each task's checks passed (tasks that have checks)
    pass_rate: float | None
    #: tasks whose checks all passed, of those with checks
    solved: int
    with_checks: int
    mean_reward: float | None
    tokens: int
    seconds: float

    @property
    def adapter(self) -> str | None:
        value = self.batch.config.get("adapter")
        return str(value) if value else None

    @property
    def solved_interval(self) -> tuple[float, float]:
        """The 95% interval of the share of tasks solved."""
        return wilson(self.solved, self.with_checks)

    def solved_text(self) -> str:
        """ "3/10 solved (95% CI 11-60%)"."""
        low, high = self.solved_interval
        return f"{self.solved}/{self.with_checks} solved (95% CI {low * 100:.0f}-{high * 100:.0f}%)"


def wilson(passed: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a rate of `passed` in `n` (95% by default)."""
    if n <= 0:
        return (0.0, 1.0)
    p = passed / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def summarize(store: TraceStore, batch: Batch) -> Summary:
    tasks = store.batch_tasks(batch.id)
    counts = dict.fromkeys(BatchTaskStatus, 0)
    for task in tasks:
        counts[task.status] += 1
    ran = [t for t in tasks if t.result]
    checked = [t for t in ran if t.result.get("checks_total")]
    fractions = [t.result["checks_passed"] / t.result["checks_total"] for t in checked]
    rewards = [float(t.result.get("reward", 0.0)) for t in ran]
    return Summary(
        batch=batch,
        counts=counts,
        pass_rate=sum(fractions) / len(fractions) if fractions else None,
        solved=sum(1 for t in checked if t.result["checks_passed"] == t.result["checks_total"]),
        with_checks=len(checked),
        mean_reward=sum(rewards) / len(rewards) if rewards else None,
        tokens=sum(int(t.result.get("tokens", 0)) for t in ran),
        seconds=sum(float(t.result.get("seconds", 0.0)) for t in ran),
    )


def by_adapter(store: TraceStore, batch: Batch) -> list[Summary]:
    """The latest finished batch of the same tasks file for each adapter (the base model
    first): a batch run with `--adapter` is an A/B evaluation against the base."""
    latest: dict[str | None, Batch] = {}
    for other in store.list_batches(source_hash=batch.source_hash, limit=1000):
        key = other.config.get("adapter") or None
        if other.id == batch.id or (key not in latest and other.status is BatchStatus.COMPLETED):
            latest.setdefault(key, other)
    latest[batch.config.get("adapter") or None] = batch
    order = sorted(latest, key=lambda name: (name is not None, name or ""))
    return [summarize(store, latest[name]) for name in order]


def describe_counts(counts: Mapping[BatchTaskStatus, int]) -> str:
    parts = [
        f"{counts[BatchTaskStatus.COMPLETED]} completed",
        f"{counts[BatchTaskStatus.FAILED]} failed",
        f"{counts[BatchTaskStatus.TRUNCATED]} truncated",
    ]
    left = counts[BatchTaskStatus.PENDING] + counts[BatchTaskStatus.ABORTED]
    if left:
        parts.append(f"{left} left")
    return ", ".join(parts)
