"""Real runtime sessions for tests: the answer task on the tiny model, with scripted
operator answers at the approval gate (see tests/support/answer_task.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from agents.approval import Answer, ApprovalRequest
from agents.events import RuntimeEvent
from agents.runtime import RunOptions, Runtime
from agents.tasks import Task
from storage import TraceStore
from tests.support.answer_task import TASK


def options(**changes: object) -> RunOptions:
    base = {
        "candidates": 3,
        "escalation": (2,),
        "rank_threshold": 100.0,  # never reached: every block escalates once
        "block_tokens": 40,
        "temperature": 1.0,
        "max_ticks": 1,
        "approval": "ask",
        "action_timeout": 10.0,
        "seed": 7,
    }
    base.update(changes)
    return RunOptions(**base)  # type: ignore[arg-type]


def make_runtime(
    store: TraceStore,
    backend: object,
    tmp_path: Path,
    answers: list[Callable[[ApprovalRequest], Answer]] | None = None,
    task: Task = TASK,
    events: list[RuntimeEvent] | None = None,
    clock: Callable[[], float] | None = None,
    **opts: object,
) -> tuple[Runtime, list[ApprovalRequest]]:
    asked: list[ApprovalRequest] = []
    queue = list(answers or [])

    def asker(request: ApprovalRequest) -> None:
        asked.append(request)
        request.future.set_result(queue.pop(0)(request) if queue else Answer.approve())

    runtime = Runtime(
        store,
        backend,  # type: ignore[arg-type]
        task,
        options(**opts),
        sessions_dir=tmp_path / "sessions",
        listener=events.append if events is not None else None,
        asker=asker if answers is not None else None,
        **({"clock": clock} if clock is not None else {}),
    )
    return runtime, asked
