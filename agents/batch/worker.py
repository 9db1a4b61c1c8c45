"""One worker: it takes up the batch's open tasks one after another (an atomic claim in
the store), runs each to its end and records how it went."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agents.batch.tasks_file import task_of
from agents.events import RuntimeEvent
from agents.runtime import RunOptions, Runtime, task_from_snapshot, ticks_done
from agents.sandbox import SandboxUnavailable
from storage import (
    BatchTask,
    BatchTaskStatus,
    NodeStatus,
    SessionStatus,
    TraceStore,
)

if TYPE_CHECKING:
    from agents.backends import Backend

log = logging.getLogger(__name__)


class BatchStopped(Exception):
    """The batch could not go on (no sandbox, the model server failed); resumable."""


_STATUS_OF = {
    SessionStatus.COMPLETED: BatchTaskStatus.COMPLETED,
    SessionStatus.FAILED: BatchTaskStatus.FAILED,
    SessionStatus.TRUNCATED: BatchTaskStatus.TRUNCATED,
    SessionStatus.ABORTED: BatchTaskStatus.ABORTED,
}


@dataclass
class WorkerContext:
    """What a worker runs tasks with."""

    store: TraceStore
    backend: Backend
    options: RunOptions
    sessions_dir: Path
    #: set to stop: the worker's running session stops at once (see `Runtime.stop`)
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
    if spec.get("choose_by_checks"):  # improve's rollouts (`RunOptions.choose_by_checks`)
        options = replace(options, choose_by_checks=True)
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


def session_reward(store: TraceStore, session_id: int) -> float:
    """The mean reward of the session's ticks (the outcome blocks on its path; weave-agent's
    reward: half the fraction of evaluations passed, less a tenth per failed attempt)."""
    rewards = [
        float(n.meta["reward"])
        for n in store.tree(session_id)
        if n.kind == "outcome" and n.status is not NodeStatus.ALTERNATE and "reward" in n.meta
    ]
    return round(sum(rewards) / len(rewards), 4) if rewards else 0.0
