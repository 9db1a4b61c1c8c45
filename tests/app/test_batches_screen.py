"""The batches screen, driven by Pilot over a real SQLite store: batches and tasks are
written through the store's batch calls (as `agent-console batch` workers write them, in
another process), sessions with `SessionBuilder`; no model is needed.

Checked: the rows (counts, progress, pass rate, reward, tokens, adapter), the highlighted
batch's tasks and its A/B line against the base, progress that changes while the screen
is open, enter opening a task's session in the tree (read again when blocks were added
since), a task not started yet, the empty state, and the key, palette and help entries.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable, Static

from agents.settings import Settings
from app.console import ConsoleApp, binding_ids
from app.screens.batches import EMPTY, BatchesScreen
from app.screens.help import HelpScreen
from app.screens.main import MainCommands
from app.widgets.trace_tree import BlockEntry, TraceTree
from storage import Batch, BatchStatus, BatchTaskStatus, TraceStore
from tests.support.label_trees import SessionBuilder
from tests.support.pilot import Notes, plain, settle, until

pytestmark = pytest.mark.timeout(120)
SIZE = (150, 40)
SPECS: list[dict[str, Any]] = [
    {"task": "vigenere"},
    {"prompt": "Sum the numbers in data.csv", "id": "csv-sum"},
    {"task": "/tasks/caesar.toml"},
    {"prompt": "Write a haiku"},
]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def result(passed: int, total: int, reward: float, tokens: int) -> dict[str, Any]:
    return {
        "ticks": 2,
        "tokens": tokens,
        "checks_passed": passed,
        "checks_total": total,
        "reward": reward,
        "seconds": 1.5,
    }


def run_task(
    store: TraceStore, batch: Batch, title: str, ticks: int = 1
) -> tuple[int, SessionBuilder]:
    """Claim the batch's next task and give it a session of `ticks` executed ticks;
    the task's id and its session."""
    task = store.claim_batch_task(batch.id, "host:1:0")
    assert task is not None
    builder = SessionBuilder(store, title)
    for tick in range(1, ticks + 1):
        builder.executed(tick)
    store.set_batch_task_session(task.id, builder.id)
    return task.id, builder


@dataclass
class Batches:
    base: Batch
    tuned: Batch
    #: the tuned batch's tasks in line order, and each started one's session
    tasks: list[int]
    sessions: list[SessionBuilder]


def two_batches(store: TraceStore) -> Batches:
    """An older batch on the base model, every task done; a newer one of the same file with
    an adapter, still running: line 1 completed, 2 failed, 3 running, 4 pending."""
    config = {"workers": 2, "approval": "auto"}
    base = store.create_batch(
        SPECS, name="tasks.jsonl", source="/t/tasks.jsonl", source_hash="h1", config=config
    )
    for line in range(1, 5):
        task_id, _ = run_task(store, base, f"base {line}")
        store.finish_batch_task(
            task_id, BatchTaskStatus.COMPLETED, result=result(line % 2, 1, 0.25, 500)
        )
    store.set_batch_status(base.id, BatchStatus.COMPLETED)

    tuned = store.create_batch(
        SPECS,
        name="tasks.jsonl",
        source="/t/tasks.jsonl",
        source_hash="h1",
        config={**config, "adapter": "sft-1"},
    )
    first, s1 = run_task(store, tuned, "tuned 1", ticks=2)
    store.finish_batch_task(first, BatchTaskStatus.COMPLETED, result=result(2, 2, 0.5, 1200))
    second, s2 = run_task(store, tuned, "tuned 2")
    store.finish_batch_task(
        second,
        BatchTaskStatus.FAILED,
        result=result(0, 2, -0.1, 800),
        error="the agent gave up:\nno progress",
    )
    third, s3 = run_task(store, tuned, "tuned 3")
    fourth = store.batch_tasks(tuned.id)[3].id
    return Batches(base, tuned, [first, second, third, fourth], [s1, s2, s3])


def no_model() -> Settings:
    return Settings(backend="none")


def batches_screen(app: ConsoleApp) -> BatchesScreen:
    assert isinstance(app.screen, BatchesScreen), app.screen
    return app.screen


def rows(app: ConsoleApp, table_id: str) -> dict[str, dict[str, str]]:
    """A table's rows by key, each as column key -> the cell's text."""
    table: DataTable[object] = batches_screen(app).query_one(table_id, DataTable)
    keys = [str(column.key.value) for column in table.ordered_columns]
    return {
        str(row.value): {key: str(cell) for key, cell in zip(keys, table.get_row(row), strict=True)}
        for row in table.rows
    }


def batch_row(app: ConsoleApp, batch_id: int) -> dict[str, str]:
    return rows(app, "#batches-table")[str(batch_id)]


def task_row(app: ConsoleApp, task_id: int) -> dict[str, str]:
    return rows(app, "#batch-tasks")[str(task_id)]


def summary(app: ConsoleApp) -> str:
    return plain(batches_screen(app).query_one("#batches-summary", Static))


def selected_block(app: ConsoleApp) -> int | None:
    node = app.main.query_one(TraceTree).cursor_node
    if node is None or not isinstance(node.data, BlockEntry):
        return None
    return node.data.node.id


def last_block(store: TraceStore, session_id: int) -> int:
    return store.tree(session_id)[-1].id


async def open_batches(app: ConsoleApp, pilot: Any) -> BatchesScreen:
    await settle(pilot)
    await pilot.press("B")
    await until(pilot, lambda: isinstance(app.screen, BatchesScreen), "the batches screen")
    screen = batches_screen(app)
    await until(pilot, lambda: screen.tasks_of is not None, "the tasks")
    return screen


async def test_batches_show_their_progress_results_and_tasks(store: TraceStore) -> None:
    made = two_batches(store)
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_batches(app, pilot)
        assert list(rows(app, "#batches-table")) == [str(made.tuned.id), str(made.base.id)]
        assert screen.selected == made.tuned.id  # newest first, and the cursor starts there
        tuned = batch_row(app, made.tuned.id)
        assert tuned == {
            "id": str(made.tuned.id),
            "name": "tasks.jsonl",
            "status": "running",
            "bar": "█████░░░░░",
            "done": "2/4",
            "completed": "1",
            "failed": "1",
            "truncated": "0",
            "running": "1",
            "left": "1",
            "pass": "50%",
            "reward": "0.200",
            "tokens": "2.0k",
            "adapter": "sft-1",
        }
        base = batch_row(app, made.base.id)
        assert base["status"] == "completed" and base["done"] == "4/4"
        assert base["bar"] == "█" * 10 and base["left"] == "0"
        assert base["pass"] == "50%" and base["reward"] == "0.250" and base["adapter"] == "base"

        first, second, third, fourth = made.tasks
        s1, _, s3 = (builder.id for builder in made.sessions)
        assert list(rows(app, "#batch-tasks")) == [str(t) for t in made.tasks]
        assert task_row(app, first) == {
            "line": "1",
            "task": "vigenere",
            "status": "completed",
            "session": f"#{s1}",
            "checks": "2/2",
            "reward": "0.500",
            "tokens": "1.2k",
            "error": "",
        }
        failed = task_row(app, second)
        assert failed["task"] == "csv-sum" and failed["status"] == "failed"
        assert failed["checks"] == "0/2" and failed["error"] == "the agent gave up: no progress"
        running = task_row(app, third)
        assert running["task"] == "caesar" and running["status"] == "running"
        assert running["session"] == f"#{s3}" and running["checks"] == "-"
        pending = task_row(app, fourth)
        assert pending["task"] == "Write a haiku" and pending["status"] == "pending"
        assert pending["session"] == "-" and pending["tokens"] == "-"

        text = summary(app)
        assert f"batch {made.tuned.id}" in text and "sft-1" in text
        assert "1 completed, 1 failed, 0 truncated, 1 left" in text
        assert (
            "50% of checks passed, 1/2 solved (95% CI 9-91%); mean reward 0.200; 2000 tokens"
            in text
        )
        # the same tasks file on the base model, for the A/B
        assert (
            f"base (batch {made.base.id}): 50% of checks passed, 2/4 solved (95% CI 15-85%)" in text
        )

        # The older batch: its own tasks.
        await pilot.press("down")
        await until(pilot, lambda: screen.tasks_of == made.base.id, "the base batch's tasks")
        statuses = {row["status"] for row in rows(app, "#batch-tasks").values()}
        assert statuses == {"completed"}
        assert f"batch {made.base.id}" in summary(app)
        # only finished batches are set beside it: the adapter's is still running
        assert "sft-1" not in summary(app)

        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main


async def test_enter_on_a_task_opens_its_session_in_the_tree(store: TraceStore) -> None:
    made = two_batches(store)
    s1 = made.sessions[0].id
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_batches(app, pilot)
        tasks = screen.query_one("#batch-tasks", DataTable)
        await pilot.press("enter")  # on the batch list: to its tasks
        await pilot.pause()
        assert screen.focused is tasks and tasks.cursor_row == 0
        await pilot.press("enter")
        await until(pilot, lambda: app.screen is app.main, "the main screen")
        await until(pilot, lambda: selected_block(app) is not None, "the block")
        assert selected_block(app) == last_block(store, s1)  # where the session ended
        assert app.main.query_one(TraceTree).has_focus

        # The session goes on (another tick written elsewhere): opened again, it is read
        # again, and its new last block is selected.
        made.sessions[0].executed(3)
        await open_batches(app, pilot)
        await pilot.press("enter", "enter")
        await until(pilot, lambda: app.screen is app.main, "the main screen")
        await until(
            pilot, lambda: selected_block(app) == last_block(store, s1), "the new last block"
        )

        # The failed task's session, further down.
        await open_batches(app, pilot)
        await pilot.press("enter", "down", "enter")
        await until(pilot, lambda: app.screen is app.main, "the main screen")
        await until(
            pilot,
            lambda: selected_block(app) == last_block(store, made.sessions[1].id),
            "the failed task's block",
        )


async def test_a_task_not_started_says_so(store: TraceStore) -> None:
    made = two_batches(store)
    notes = Notes()
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        screen = await open_batches(app, pilot)
        await pilot.press("enter", "down", "down", "down")
        await pilot.pause()
        assert screen.highlighted_task is not None
        assert screen.highlighted_task.id == made.tasks[3]
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is screen
        assert "task 4 (Write a haiku) has not started: no session yet" in notes.text()


async def test_progress_written_elsewhere_shows_while_the_screen_is_open(
    store: TraceStore,
) -> None:
    made = two_batches(store)
    third, fourth = made.tasks[2:]
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_batches(app, pilot)
        assert batch_row(app, made.tuned.id)["done"] == "2/4"

        # A worker finishes line 3 (truncated) and takes up line 4.
        store.finish_batch_task(third, BatchTaskStatus.TRUNCATED, result=result(1, 2, 0.1, 300))
        claimed = store.claim_batch_task(made.tuned.id, "host:1:1")
        assert claimed is not None and claimed.id == fourth
        await until(pilot, lambda: batch_row(app, made.tuned.id)["done"] == "3/4", "the count")
        row = batch_row(app, made.tuned.id)
        assert (row["truncated"], row["running"], row["left"]) == ("1", "1", "0")
        assert row["bar"] == "████████░░"
        await until(pilot, lambda: task_row(app, third)["status"] == "truncated", "the task")
        assert task_row(app, third)["checks"] == "1/2"
        assert task_row(app, fourth)["status"] == "running"

        # The last task ends and the batch with it.
        session = SessionBuilder(store, "tuned 4")
        store.set_batch_task_session(fourth, session.id)
        store.finish_batch_task(fourth, BatchTaskStatus.COMPLETED, result=result(2, 2, 1.0, 100))
        store.set_batch_status(made.tuned.id, BatchStatus.COMPLETED)
        await until(
            pilot, lambda: batch_row(app, made.tuned.id)["status"] == "completed", "the batch"
        )
        assert batch_row(app, made.tuned.id)["done"] == "4/4"
        await until(pilot, lambda: task_row(app, fourth)["session"] == f"#{session.id}", "it")
        assert "2 completed, 1 failed, 1 truncated" in summary(app)

        # A new batch appears at the top; the highlighted one stays highlighted.
        newer = store.create_batch(
            SPECS[:1], name="more.jsonl", source="/t/more.jsonl", source_hash="h2"
        )
        await until(pilot, lambda: str(newer.id) in rows(app, "#batches-table"), "the new batch")
        order = list(rows(app, "#batches-table"))
        assert order == [str(newer.id), str(made.tuned.id), str(made.base.id)]
        assert batch_row(app, newer.id)["done"] == "0/1"
        assert batch_row(app, newer.id)["left"] == "1"
        assert screen.selected == made.tuned.id
        assert screen.tasks_of == made.tuned.id


async def test_no_batches_says_how_to_start_one(store: TraceStore) -> None:
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("B")
        await until(pilot, lambda: isinstance(app.screen, BatchesScreen), "the screen")
        screen = batches_screen(app)
        await until(pilot, lambda: screen.loaded, "the first read")
        assert "agent-console batch TASKS.jsonl" in summary(app) == EMPTY + "\n"
        await pilot.press("enter", "enter")  # nothing to open: nothing happens
        await pilot.pause()
        assert app.screen is screen
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main


async def test_the_key_palette_and_help(store: TraceStore) -> None:
    assert {"main.batches", "batches.open", "batches.back"} <= binding_ids()
    app = ConsoleApp(store=store, settings=no_model())
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        names = [str(hit.text) async for hit in MainCommands(app.main).discover()]
        assert "batch: Batches" in names
        await app.main.run_action("app.batches")
        await until(pilot, lambda: isinstance(app.screen, BatchesScreen), "the screen")
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = plain(app.screen.query_one("#help-keys", Static))
        assert "main.batches" in keys and "Batch runs" in keys
