"""Live sessions in the console, for real: the tiny model in process, the sandbox, the
approval modal driven by keys, and every verdict checked in the store."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.widgets import Input, TextArea

from agents.settings import Settings
from app.console import ConsoleApp
from app.screens.approval import ApprovalScreen
from app.widgets.chat import ChatLog
from app.widgets.status_bar import StatusBar
from app.widgets.trace_tree import TraceTree
from storage import Author, NodeStatus, SessionStatus, TraceStore, Verdict
from tests.support.answer_task import SOLVE, TASK

pytestmark = pytest.mark.timeout(300)
SIZE = (140, 44)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def settings(model: Path, **changes: object) -> Settings:
    values: dict[str, object] = {
        "backend": "transformers",
        "model": str(model),
        "approval": "ask",
        "candidates": 3,
        "escalation": (),
        "block_tokens": 40,
        "temperature": 1.0,
        "max_ticks": 1,
        "action_timeout": 10.0,
    }
    values.update(changes)
    return Settings(**values)  # type: ignore[arg-type]


async def until(pilot: Pilot[None], condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 120
    while not condition():
        if time.monotonic() > deadline:
            app = pilot.app
            assert isinstance(app, ConsoleApp)
            status = app.main.query_one(StatusBar)
            raise AssertionError(
                f"timed out waiting for {what}: screen {type(app.screen).__name__}, "
                f"session {status.session!r}, mode {status.mode!r}, backend {status.backend!r}"
            )
        await pilot.pause(0.05)


def asking(app: ConsoleApp) -> bool:
    return isinstance(app.screen, ApprovalScreen)


async def type_text(pilot: Pilot[None], text: str) -> None:
    await pilot.press(*["space" if c == " " else c for c in text])


def chat_lines(app: ConsoleApp) -> list[str]:
    return [line.text for line in app.main.query_one(ChatLog).lines]


async def test_reject_then_edit_through_the_modal_are_stored(
    store: TraceStore, tiny_model_dir: Path
) -> None:
    notes: list[str] = []

    def hook(message: object) -> None:
        if isinstance(message, Notify):
            notes.append(message.notification.message)

    app = ConsoleApp(store=store, settings=settings(tiny_model_dir), task=TASK)
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await until(pilot, lambda: asking(app), "the first approval request")
        first = app.screen
        assert isinstance(first, ApprovalScreen)
        rejected = first.request.action
        await pilot.press("r")
        await type_text(pilot, "too risky")
        await pilot.press("enter")
        await until(pilot, lambda: asking(app) and app.screen is not first, "the second request")
        await until(pilot, lambda: bool(app.screen.query("#approval-retry")), "its dialog composed")

        second = app.screen
        assert isinstance(second, ApprovalScreen)
        assert first.request.retry is None
        # The second request is the tick's second try, and says so and why.
        assert second.request.retry == f"try 2 of 3: action #{rejected.id} was rejected (too risky)"
        assert second.query_one("#approval-retry").display
        original = second.request.action
        await pilot.press("e")
        await pilot.pause()
        editor = second.query_one(TextArea)
        editor.text = "def broken(:\n    pass"
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen is second  # refused: still asking
        assert any(n.startswith("line 1") for n in notes), notes
        editor.text = SOLVE
        await pilot.press("ctrl+s")
        await until(pilot, lambda: app.main.live is None, "the session to end")
        await pilot.pause()

        session_id = rejected.session_id
        assert store.get_session(session_id).status is SessionStatus.COMPLETED
        (reject,) = store.decisions(rejected.id)
        assert reject.verdict is Verdict.REJECT and reject.reason == "too risky"
        assert store.get_node(rejected.id).status is NodeStatus.REJECTED
        (edit,) = store.decisions(original.id)
        assert edit.verdict is Verdict.EDIT
        assert edit.result_node_id is not None
        operator = store.get_node(edit.result_node_id)
        assert operator.author is Author.OPERATOR
        assert operator.edited_from_id == original.id
        assert operator.text == SOLVE
        assert operator.status is NodeStatus.EXECUTED
        assert store.get_node(original.id).status is NodeStatus.EDITED

        # the agent's tell_operator reached the chat; the tree shows the marks
        assert any("agent: I wrote 42 to answer.txt" in line for line in chat_lines(app))
        tree = app.main.query_one(TraceTree)
        trace = tree.traces[session_id]
        assert trace.nodes[operator.id].status is NodeStatus.EXECUTED
        labels = {n.id: tree.block_text(trace, n).plain for n in trace.nodes.values()}
        assert labels[rejected.id].startswith("✘ action")
        assert labels[original.id].startswith("✎ action")
        assert "completed" in str(app.main.query_one(StatusBar).session)


async def test_picking_an_alternate_with_a_digit(store: TraceStore, tiny_model_dir: Path) -> None:
    app = ConsoleApp(store=store, settings=settings(tiny_model_dir), task=TASK)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: asking(app), "an approval request")
        screen = app.screen
        assert isinstance(screen, ApprovalScreen)
        replaced = screen.request.action
        picked = screen.request.alternates[0]
        await pilot.press("1")
        await until(pilot, lambda: bool(store.decisions(replaced.id)), "the verdict")
        (pick,) = store.decisions(replaced.id)
        assert pick.verdict is Verdict.PICK_ALTERNATE
        assert pick.result_node_id == picked.id
        await until(
            pilot,
            lambda: store.get_node(picked.id).status in (NodeStatus.EXECUTED, NodeStatus.FAILED),
            "the picked alternate to run",
        )
        assert store.get_node(replaced.id).status is NodeStatus.ALTERNATE
        app.main.action_stop()
        await until(pilot, lambda: app.main.live is None, "the stop")


async def test_step_mode_and_chat_in_a_session_started_from_the_chat(
    store: TraceStore, tiny_model_dir: Path
) -> None:
    # one short candidate a block: what is asserted is the stepping, not the sampling
    chosen = settings(tiny_model_dir, max_ticks=2, approval="auto", candidates=1, block_tokens=16)
    app = ConsoleApp(store=store, settings=chosen)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model to load")
        # no live session: the session keys are not offered; s arms step mode instead
        assert app.main.check_action("stop", ()) is False
        assert app.main.check_action("run", ()) is False
        tree = app.main.query_one(TraceTree)
        tree.focus()
        await pilot.pause()
        await pilot.press("s")
        status = app.main.query_one(StatusBar)
        assert status.mode == "next session steps by block"
        chat = app.main.query_one("#chat-input", Input)
        chat.focus()
        await pilot.pause()
        await type_text(pilot, "Write 42 to answer.txt")
        await pilot.press("enter")
        await until(pilot, lambda: app.main.live is not None, "a session to start")
        live = app.main.live
        assert live is not None
        assert chat_lines(app)[0] == "you: Write 42 to answer.txt"

        # step mode from its first block: one block per press
        await until(pilot, lambda: status.mode == "step: next genesis (s)", "the agent to wait")
        tree.focus()
        await pilot.pause()
        session_id = live.session_id
        assert store.get_session(session_id).task == "Write 42 to answer.txt"

        def count() -> int:
            return store.count_nodes(session_id)

        before = count()
        await pilot.pause(0.5)
        assert count() == before  # waiting, not writing
        await pilot.press("s")
        await until(pilot, lambda: count() > before, "one block")
        await until(pilot, lambda: status.mode.startswith("step: next"), "the next wait")
        after_one = count()
        await pilot.pause(0.5)
        assert count() == after_one

        # a chat message while it waits: shown, and in the trace at the next tick boundary
        chat.focus()
        await pilot.pause()
        await type_text(pilot, "careful with answer.txt")
        await pilot.press("enter")
        assert chat_lines(app)[-1] == "you: careful with answer.txt"
        # pause holds it even when stepping is switched off; p again lets it go
        tree.focus()
        await pilot.pause()
        await pilot.press("p")
        assert status.mode == "paused"
        await pilot.press("c")
        assert status.mode == "run"

        await until(pilot, lambda: app.main.live is None, "the session to end")
        told = [
            n
            for n in store.tree(session_id)
            if n.kind == "observation" and n.meta.get("title") == "Operator"
        ]
        assert [n.text for n in told] == ["careful with answer.txt"]
        assert store.get_session(session_id).status in (
            SessionStatus.COMPLETED,
            SessionStatus.TRUNCATED,
        )


async def test_stop_while_the_modal_is_open_closes_it(
    store: TraceStore, tiny_model_dir: Path
) -> None:
    app = ConsoleApp(store=store, settings=settings(tiny_model_dir), task=TASK)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: asking(app), "an approval request")
        session_id = app.main.live.session_id if app.main.live else 0
        app.main.action_stop()
        await until(pilot, lambda: not asking(app) and app.main.live is None, "the stop")
        stored = store.get_session(session_id)
        assert stored.status is SessionStatus.ABORTED
        assert app.is_running
        # the session's line says why it ended, as the store has it, from the live event
        reason = stored.settings["status_reason"]
        assert reason
        line = app.main.query_one(TraceTree).session_nodes[session_id].label
        assert f"aborted: {reason}" in str(line), str(line)


async def test_a_new_session_clears_the_last_sessions_block_from_view(
    store: TraceStore, tiny_model_dir: Path
) -> None:
    """The block view, the candidates and the inspector showed the previous session's
    block after a new session started; they now start empty with it."""
    from app.widgets.block_view import EMPTY
    from app.widgets.inspector import EMPTY as INSPECTOR_EMPTY
    from tests.app.test_console import expand_first_session, inspected, select, shown
    from tests.support.traces import build_session

    earlier = build_session(store, blocks=12, seed=3, title="An earlier session")
    last = store.tree(earlier)[-1]
    chosen = settings(tiny_model_dir, approval="deny", candidates=1, block_tokens=16)
    app = ConsoleApp(store=store, settings=chosen)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model to load")
        await expand_first_session(app, pilot)  # its last tick's blocks show
        await select(app, pilot, last)
        await until(pilot, lambda: f"#{last.id} " in shown(app), "the block in view")
        await until(pilot, lambda: inspected(app) != INSPECTOR_EMPTY, "its tick inspected")
        app.main.start_session(TASK)
        assert shown(app).strip() == EMPTY and inspected(app) == INSPECTOR_EMPTY
        live = app.main.live
        assert live is not None
        await until(pilot, lambda: live.session_id != 0, "the session to be stored")
        # the tree follows the new session: its line is the one in view
        await until(
            pilot, lambda: shown(app).startswith(f"session #{live.session_id}"), "the new session"
        )
        await until(pilot, lambda: app.main.live is None, "the session to end")


async def test_escape_sets_the_decision_aside_and_d_takes_it_up(
    store: TraceStore, tiny_model_dir: Path
) -> None:
    """The panel leaves the tree and the status bar in sight; escape closes it with nothing
    decided and the status bar says so; `d` brings the same request back."""
    app = ConsoleApp(store=store, settings=settings(tiny_model_dir), task=TASK)
    async with app.run_test(size=SIZE) as pilot:
        # the panel is pushed, then composed: on a loaded machine a poll can come between
        await until(
            pilot,
            lambda: asking(app) and bool(app.screen.query("#approval-dialog")),
            "the first approval request",
        )
        panel = app.screen
        assert isinstance(panel, ApprovalScreen)
        dialog = panel.query_one("#approval-dialog")
        await until(pilot, lambda: dialog.region.width > 0, "the panel laid out")
        tree, status = app.main.query_one(TraceTree), app.main.query_one(StatusBar)
        assert dialog.region.x >= tree.region.right  # the tree is not covered
        assert dialog.region.bottom <= status.region.y  # nor is the status bar
        request = panel.request
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main and not request.future.done()
        assert f"action #{request.action.id} waits: d decides" in status.mode
        assert app.main.check_action("decide", ()) is True
        await pilot.press("d")
        await until(pilot, lambda: asking(app), "the request again")
        assert isinstance(app.screen, ApprovalScreen) and app.screen.request is request
        await pilot.press("x")
        await until(pilot, lambda: app.main.live is None, "the session to stop")
        assert app.main.check_action("decide", ()) is False


async def test_loading_an_adapter_from_the_jobs_screen_while_a_session_waits(
    store: TraceStore, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    """The refusal names where the stop key is (the jobs screen has no `x`), and the
    decision set aside to go there is still there to take up."""
    from app.screens.jobs import JobsScreen
    from storage import JobKind, JobStatus
    from tests.support.pilot import Notes

    store.register_adapter("tuned", base_model=str(tiny_model_dir), path=tiny_adapter_dir)
    job = store.create_job(JobKind.SFT, "tuned", base_model=str(tiny_model_dir))
    store.update_job(job.id, status=JobStatus.COMPLETED, progress=1.0)
    notes = Notes()
    app = ConsoleApp(store=store, settings=settings(tiny_model_dir), task=TASK)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await until(pilot, lambda: asking(app), "the first approval request")
        await pilot.press("escape")
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the jobs screen")
        await until(pilot, lambda: app.screen.selected == job.id, "the job selected")  # type: ignore[attr-defined]
        await pilot.press("l")
        await until(pilot, lambda: "x on the main screen" in notes.text(), "the refusal")
        assert app.workbench.backend is not None and app.workbench.backend.active_adapter is None
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, "the main screen")
        await pilot.press("d")
        await until(pilot, lambda: asking(app), "the decision taken up")
        await pilot.press("x")
        await until(pilot, lambda: app.main.live is None, "the session to stop")


async def test_resume_the_selected_session_from_the_tree_with_its_own_settings(
    store: TraceStore, tiny_model_dir: Path
) -> None:
    """Before, a stored session could not be resumed from the console. It goes on as it
    was started (approval `auto` here, while the console asks), not with the console's."""
    from agents.runtime import RunOptions, task_snapshot
    from tests.app.test_console import settle

    started = RunOptions(
        candidates=2, escalation=(), block_tokens=24, temperature=1.0, max_ticks=1, approval="auto"
    )
    done = store.create_session("done", title="Done", status=SessionStatus.COMPLETED).id
    stopped = store.create_session(
        TASK.prompt,
        title="Stopped",
        settings={"task": task_snapshot(TASK), "run": started.snapshot()},
        status=SessionStatus.ABORTED,
    ).id
    notes: list[str] = []

    def hook(message: object) -> None:
        if isinstance(message, Notify):
            notes.append(message.notification.message)

    app = ConsoleApp(store=store, settings=settings(tiny_model_dir))
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model to load")
        await settle(app, pilot)
        tree = app.main.query_one(TraceTree)
        tree.focus()
        await pilot.pause()
        assert tree.selected_session() is not None and tree.selected_session().id == stopped
        await pilot.press("R")
        ended = (SessionStatus.COMPLETED, SessionStatus.TRUNCATED)
        # its one tick can be over before a poll sees it live: the stored status says
        await until(
            pilot,
            lambda: store.get_session(stopped).status in ended and app.main.live is None,
            "the session to go on and end",
        )
        assert not asking(app)  # `auto`, as it was started: nobody was asked
        resumed = store.get_session(stopped)
        assert resumed.status in ended
        assert resumed.settings["run"]["candidates"] == 2
        tree.move_cursor(tree.session_nodes[done])
        await pilot.pause()
        assert tree.selected_session() is not None and tree.selected_session().id == done
        await pilot.press("R")
        await pilot.pause()
        assert f"session {done} is completed: nothing to resume" in notes
