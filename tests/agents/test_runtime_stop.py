"""A session stopped while it starts, and resuming one that has no blocks at all (what a
batch does with a task stopped that early): the tiny real model, the real sandbox, a real
SQLite store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import blocks
from agents.approval import Answer
from agents.events import (
    BlockSampled,
    NodeChanged,
    RuntimeEvent,
    SamplingProgress,
    SessionStarted,
    StatusChanged,
)
from agents.processes import this_process
from agents.runtime import Runtime, task_snapshot
from agents.sandbox import Kernel
from storage import SessionStatus, TraceStore
from tests.support.answer_task import SOLVE, TASK
from tests.support.runs import options

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path) -> Iterator[Any]:
    from agents.backends.transformers_backend import TransformersBackend

    loaded = TransformersBackend(str(tiny_model_dir))
    yield loaded
    loaded.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def runtime_for(
    store: TraceStore,
    backend: Any,
    tmp_path: Path,
    *,
    listener: Any = None,
    resume: int | None = None,
    **opts: object,
) -> Runtime:
    """A runtime whose one action is the operator's SOLVE edit (the session completes)."""
    return Runtime(
        store,
        backend,
        TASK,
        options(**{"escalation": (), **opts}),
        sessions_dir=tmp_path / "sessions",
        listener=listener,
        asker=lambda request: request.future.set_result(Answer.edit(SOLVE)),
        resume=resume,
    )


def statuses(events: list[RuntimeEvent]) -> list[tuple[str, str | None]]:
    return [(e.status.value, e.reason) for e in events if isinstance(e, StatusChanged)]


def assert_stopped(store: TraceStore, runtime: Runtime, outcome: Any) -> None:
    assert outcome.status is SessionStatus.ABORTED, outcome
    assert outcome.reason == "stopped by the operator"
    assert outcome.backend_error is None
    assert outcome.session_id == runtime.session_id != 0
    assert store.get_session(outcome.session_id).status is SessionStatus.ABORTED
    kernel = runtime.kernels.kernel
    assert kernel is None or not kernel.alive  # nothing left running


# -- stopped while starting ----------------------------------------------------------------


def test_stop_before_run_aborts_before_the_first_block(
    store: TraceStore, backend: Any, tmp_path: Path
) -> None:
    """A batch stops a runtime it has built but not yet run: run() opens the session,
    stores nothing in it, and returns aborted."""
    events: list[RuntimeEvent] = []
    runtime = runtime_for(store, backend, tmp_path, listener=events.append)
    runtime.stop()
    outcome = runtime.run()
    assert_stopped(store, runtime, outcome)
    assert store.count_nodes(outcome.session_id) == 0
    # the process running it is recorded (a console finds the sessions of a dead one)
    assert store.get_session(outcome.session_id).settings["owner"] == this_process()
    assert outcome.ticks == 0 and outcome.tokens == 0
    assert statuses(events) == [("aborted", "stopped by the operator")]
    assert (
        outcome.message
        == f"session {outcome.session_id} aborted after 0 ticks (stopped by the operator)"
    )
    assert len(store.list_sessions()) == 1


def test_stop_from_the_listener_on_the_first_event(
    store: TraceStore, backend: Any, tmp_path: Path
) -> None:
    """The first event is the session's first line, the first block the genesis; a stop
    there ends the session before its first tick."""
    events: list[RuntimeEvent] = []
    runtime: Runtime

    def listener(event: RuntimeEvent) -> None:
        if isinstance(event, NodeChanged) and not any(isinstance(e, NodeChanged) for e in events):
            runtime.stop()
        events.append(event)

    runtime = runtime_for(store, backend, tmp_path, listener=listener)
    outcome = runtime.run()
    assert_stopped(store, runtime, outcome)
    first, second = events[:2]
    assert isinstance(first, SessionStarted) and "3 candidates a block" in first.text
    assert isinstance(second, NodeChanged) and second.node.kind == blocks.GENESIS
    assert [n.kind for n in store.tree(outcome.session_id)] == [blocks.GENESIS]
    assert statuses(events) == [("aborted", "stopped by the operator")]


def test_a_stop_cuts_the_models_work_under_way(
    store: TraceStore, backend: Any, tmp_path: Path
) -> None:
    """A stop while the model samples a block ends its forward passes at the next layer:
    the block is never finished nor stored (on a CPU a forward pass over a long prompt
    takes seconds; quitting the console must not wait for it, nor for the rest of the
    block). Before, the block ran to its last token and the session ended after it."""
    events: list[RuntimeEvent] = []
    runtime: Runtime

    def listener(event: RuntimeEvent) -> None:
        events.append(event)
        if isinstance(event, SamplingProgress):  # on the generating thread, mid-block
            runtime.stop()

    runtime = runtime_for(store, backend, tmp_path, listener=listener, block_tokens=400)
    outcome = runtime.run()
    assert_stopped(store, runtime, outcome)
    progress = [e for e in events if isinstance(e, SamplingProgress)]
    assert len(progress) == 1 and progress[0].tokens < 400
    assert not any(isinstance(e, BlockSampled) for e in events)
    sampled = {blocks.ORIENTATION, blocks.ACTION, blocks.EXPECTATION, blocks.EVALUATION}
    assert not sampled & {n.kind for n in store.tree(outcome.session_id)}
    assert statuses(events) == [("aborted", "stopped by the operator")]


@pytest.mark.parametrize("when", ["before", "during"])
def test_stop_while_the_kernel_starts(
    store: TraceStore, backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    """Another thread stops the runtime while its sandbox kernel is launching: `before`
    the launch (the kernel is closed under it: start() raises), or `during` it (the new
    kernel process is killed as it comes up). Either way the session is aborted, no
    exception escapes and no kernel is left running."""
    launching = threading.Event()
    stopped = threading.Event()
    launch = Kernel._launch
    start = Kernel.start

    def slow_start(self: Kernel) -> None:
        if when == "before":
            launching.set()
            assert stopped.wait(30)
        start(self)

    def slow_launch(self: Kernel) -> None:
        launch(self)
        if when == "during":
            launching.set()
            assert stopped.wait(30)

    monkeypatch.setattr(Kernel, "start", slow_start)
    monkeypatch.setattr(Kernel, "_launch", slow_launch)
    runtime = runtime_for(store, backend, tmp_path)

    def stopper() -> None:
        assert launching.wait(60)
        threading.Timer(0.2, stopped.set).start()  # close() waits for the launch to end
        runtime.stop()
        stopped.set()

    thread = threading.Thread(target=stopper)
    thread.start()
    outcome = runtime.run()
    thread.join(60)
    assert_stopped(store, runtime, outcome)
    assert store.count_nodes(outcome.session_id) == 0
    # the process running it is recorded (a console finds the sessions of a dead one)
    assert store.get_session(outcome.session_id).settings["owner"] == this_process()


# -- interrupted (Ctrl-C, or a signal headless turns into a KeyboardInterrupt) --------------


@pytest.mark.parametrize(
    ("interrupt", "reason"),
    [
        (KeyboardInterrupt(), "stopped by the operator"),  # Ctrl-C
        (KeyboardInterrupt("stopped by SIGTERM"), "stopped by SIGTERM"),  # app.signals
    ],
    ids=["ctrl-c", "sigterm"],
)
@pytest.mark.parametrize("where", ["starting", "running"])
def test_an_interrupt_aborts_the_session_with_its_reason(
    store: TraceStore,
    backend: Any,
    tmp_path: Path,
    interrupt: KeyboardInterrupt,
    reason: str,
    where: str,
) -> None:
    """A KeyboardInterrupt in the runtime's thread, while the session starts (on its
    genesis block) or once it runs (on its first orientation), aborts the session and
    stores why: its text when it has one ("stopped by SIGTERM"), else the operator's
    Ctrl-C. No exception escapes, no kernel is left running, and it can be resumed."""
    events: list[RuntimeEvent] = []
    kind = blocks.GENESIS if where == "starting" else blocks.ORIENTATION

    def listener(event: RuntimeEvent) -> None:
        events.append(event)
        if isinstance(event, NodeChanged) and event.node.kind == kind:
            raise interrupt  # once: the session ends on it

    runtime = runtime_for(store, backend, tmp_path, listener=listener)
    outcome = runtime.run()
    assert outcome.status is SessionStatus.ABORTED, outcome
    assert outcome.reason == reason
    assert outcome.message.endswith(f"({reason})")
    session = store.get_session(outcome.session_id)
    assert (session.status, session.status_reason) == (SessionStatus.ABORTED, reason)
    assert statuses(events)[-1] == ("aborted", reason)
    kernel = runtime.kernels.kernel
    assert kernel is None or not kernel.alive
    again = runtime_for(store, backend, tmp_path, resume=outcome.session_id)
    assert again.run().status is SessionStatus.COMPLETED


# -- resuming a session with no blocks ------------------------------------------------------


def blockless_session(store: TraceStore, backend: Any) -> int:
    """A session as the runtime opens one, stopped before its genesis block."""
    session = store.create_session(
        TASK.prompt,
        title=TASK.title,
        backend=backend.name,
        model=backend.model,
        settings={"task": task_snapshot(TASK), "run": options(escalation=()).snapshot()},
        status=SessionStatus.ABORTED,
    )
    return session.id


def assert_started_from_genesis(
    store: TraceStore, runtime: Runtime, session_id: int, outcome: Any
) -> None:
    assert outcome.session_id == session_id
    assert outcome.status is SessionStatus.COMPLETED, outcome
    assert [s.id for s in store.list_sessions()] == [session_id]  # no new session
    assert store.get_session(session_id).status is SessionStatus.COMPLETED
    tree = store.tree(session_id)
    genesis = [n for n in tree if n.kind == blocks.GENESIS]
    assert len(genesis) == 1
    assert genesis[0].parent_id is None and genesis[0].tick == 0
    assert "it holds: question.txt." in genesis[0].text  # the task's files were seeded
    assert tree[0].id == genesis[0].id
    reminders = [n for n in tree if n.kind == blocks.TASK_REMINDER]
    assert reminders[0].tick == 1 and reminders[0].parent_id == genesis[0].id
    assert runtime.workdir == runtime.sessions_dir / str(session_id) / "work"
    assert (runtime.workdir / "question.txt").read_text() == "What is six times seven?\n"
    assert (runtime.workdir / "answer.txt").read_text() == "42\n"
    assert runtime.task_passed == (1, 1)


def test_resuming_a_session_with_no_blocks_starts_it(
    store: TraceStore, backend: Any, tmp_path: Path
) -> None:
    session_id = blockless_session(store, backend)
    events: list[RuntimeEvent] = []
    runtime = runtime_for(store, backend, tmp_path, listener=events.append, resume=session_id)
    outcome = runtime.run()
    assert_started_from_genesis(store, runtime, session_id, outcome)
    seen = statuses(events)
    assert seen[0] == ("running", "resumed") and seen[-1] == ("completed", None)
    assert all(e.session_id == session_id for e in events)


def test_a_session_stopped_before_its_first_block_resumes_from_genesis(
    store: TraceStore, backend: Any, tmp_path: Path
) -> None:
    """Stop before run, then resume: what a batch does with a task stopped that early."""
    first = runtime_for(store, backend, tmp_path)
    first.stop()
    stopped = first.run()
    assert_stopped(store, first, stopped)
    assert store.count_nodes(stopped.session_id) == 0

    second = runtime_for(store, backend, tmp_path, resume=stopped.session_id)
    outcome = second.run()
    assert_started_from_genesis(store, second, stopped.session_id, outcome)


def test_stop_while_resuming_a_session_with_no_blocks(
    store: TraceStore, backend: Any, tmp_path: Path
) -> None:
    """Stopped on the `resumed` status event, before the genesis block: aborted again,
    still without blocks, and resumable once more."""
    session_id = blockless_session(store, backend)
    events: list[RuntimeEvent] = []
    runtime: Runtime

    def listener(event: RuntimeEvent) -> None:
        events.append(event)
        if isinstance(event, StatusChanged) and event.reason == "resumed":
            runtime.stop()

    runtime = runtime_for(store, backend, tmp_path, listener=listener, resume=session_id)
    outcome = runtime.run()
    assert_stopped(store, runtime, outcome)
    assert outcome.session_id == session_id
    assert store.count_nodes(session_id) == 0
    assert statuses(events) == [("running", "resumed"), ("aborted", "stopped by the operator")]

    again = runtime_for(store, backend, tmp_path, resume=session_id)
    assert_started_from_genesis(store, again, session_id, again.run())
