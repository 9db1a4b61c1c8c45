"""Snapshots of every screen and dialog at 80x24 (the smallest terminal the console is
made for) and 160x48, over the deterministic store of tests/app/snapshot_apps/main_app.py.

Each snapshot opens its screen the way the console does, then waits for the workers; no
model is loaded, so the A/B screens show why they have no verdict. The approval modal
and the message log have snapshots of their own (tests/app/test_approval.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import cast

import pytest
from rich.style import Style
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import Button, Input, RadioButton, Static, TextArea

from agents.settings import Settings
from agents.tasks import prompt_task
from app.console import ConsoleApp
from app.dialogs import AdapterPicker, ConfirmScreen
from app.screens.batches import BatchesScreen
from app.screens.compare import CompareScreen
from app.screens.held_out import HeldOutScreen
from app.screens.help import HelpScreen
from app.screens.jobs import JobsScreen
from app.screens.label import LabelScreen
from app.screens.search import SearchScreen
from app.screens.similar import SimilarScreen
from app.screens.train_confirm import TrainConfirmScreen
from app.widgets.chat import ChatInput
from app.widgets.trace_tree import TraceTree
from storage import BatchTaskStatus, LabelValue, TraceStore
from tests.app.snapshot_apps.main_app import MainTrace, build_main_trace
from tests.support.pilot import plain, settle
from training.ab import held_out_variants

pytestmark = pytest.mark.timeout(120)

SNAPSHOT_APP = Path(__file__).parent / "snapshot_apps" / "main_app.py"
SIZES = {"80x24": (80, 24), "160x48": (160, 48)}
Opener = Callable[[ConsoleApp], Awaitable[None]]


def built(app: ConsoleApp) -> MainTrace:
    """The snapshot app's trace (the plugin loads main_app.py from its path, a module of
    its own: its classes are not the ones imported here)."""
    trace = getattr(app, "trace", None)
    assert trace is not None, app
    return cast(MainTrace, trace)


async def _main(app: ConsoleApp) -> None:
    """The tree with the session open (its ticks listed)."""
    app.main.query_one("#trace-tree").focus()


async def _chat(app: ConsoleApp) -> None:
    app.main.query_one("#chat-input", Input).focus()


async def _label(app: ConsoleApp) -> None:
    await app.push_screen(LabelScreen(app.store))


async def _jobs(app: ConsoleApp) -> None:
    await app.push_screen(JobsScreen(app.store))


async def _batches(app: ConsoleApp) -> None:
    store = app.store
    batch = store.create_batch(
        [{"task": "vigenere"}, {"prompt": "Sum the numbers in data.csv", "id": "csv-sum"}],
        name="tasks.jsonl",
        source="tasks.jsonl",
        source_hash="h1",
        config={"workers": 1, "approval": "auto"},
    )
    task = store.claim_batch_task(batch.id, "host:1:0")
    assert task is not None
    store.set_batch_task_session(task.id, built(app).session.id)
    result = {"ticks": 3, "tokens": 900, "checks_passed": 1, "checks_total": 2, "reward": 0.5,
              "seconds": 2.0}  # fmt: skip
    store.finish_batch_task(task.id, BatchTaskStatus.COMPLETED, result=result)
    await app.push_screen(BatchesScreen(store))


async def _compare(app: ConsoleApp) -> None:
    task = prompt_task("Fix the failing config test")
    await app.push_screen(CompareScreen(app.store, task, "sft-1"))


async def _held_out(app: ConsoleApp) -> None:
    await app.push_screen(HeldOutScreen("sft-1", held_out_variants(1)))


async def _search(app: ConsoleApp) -> None:
    await app.push_screen(SearchScreen(app.store, app.workbench.memory))


async def _similar(app: ConsoleApp) -> None:
    label = app.store.add_label(built(app).action.id, LabelValue.GOOD)
    assert label is not None
    await app.push_screen(SimilarScreen(app.store, app.workbench.memory, label))


async def _help(app: ConsoleApp) -> None:
    await app.push_screen(HelpScreen(app.main))


async def _train(app: ConsoleApp) -> None:
    # Nothing is queued, so nothing is written under data_dir.
    screen = TrainConfirmScreen(app.store, base_model="Qwen/Qwen2.5-0.5B", data_dir=Path("-"))
    await app.push_screen(screen)


async def _confirm(app: ConsoleApp) -> None:
    await app.push_screen(
        ConfirmScreen("Cancel job 1 (sft-1)?", "It saves a checkpoint to resume from.")
    )


async def _adapters(app: ConsoleApp) -> None:
    await app.push_screen(AdapterPicker(app.store, "Use which adapter?"))


SCREENS: dict[str, Opener] = {
    "main": _main,
    "main-chat": _chat,
    "label": _label,
    "jobs": _jobs,
    "batches": _batches,
    "compare": _compare,
    "held-out": _held_out,
    "search": _search,
    "similar": _similar,
    "help": _help,
    "train": _train,
    "confirm": _confirm,
    "adapters": _adapters,
}


def opening(open_screen: Opener) -> Callable[[Pilot[None]], Awaitable[None]]:
    async def run_before(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, ConsoleApp)
        await settle(pilot)
        await pilot.press("space")  # the first session's ticks, under the other screens
        await settle(pilot)
        app.clear_notifications()  # "no model", which would stay under a modal
        await pilot.pause()
        await open_screen(app)
        await settle(pilot)
        app.clear_notifications()  # the A/B screens' failures: toasts
        # A blinking cursor is drawn or not depending on when the frame is taken (the
        # search screen's input flaked under load): held on, every run draws the same.
        for widget in app.screen.query("Input, TextArea"):
            if isinstance(widget, Input | TextArea):
                widget.cursor_blink = False
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("screen", SCREENS)
def test_snapshot(snap_compare, screen: str, size: str) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(
        SNAPSHOT_APP, terminal_size=SIZES[size], run_before=opening(SCREENS[screen])
    )


# -- what the snapshots rely on, asserted --------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def console(store: TraceStore) -> ConsoleApp:
    return ConsoleApp(store=store, settings=Settings(backend="none"))


def without_colour(widget: Widget) -> list[tuple[str, bool, bool, bool]]:
    """A widget's first line as a terminal with no colour shows it: text, bold, reverse,
    underline."""
    shown = []
    for segment in widget.render_line(0):
        style = segment.style or Style()
        shown.append((segment.text, bool(style.bold), bool(style.reverse), bool(style.underline)))
    return shown


async def test_the_training_dialog_keeps_its_buttons_and_problem_in_view_at_80x24(
    store: TraceStore, tmp_path: Path
) -> None:
    """No labels: the problem says why; the form scrolls under it and the buttons."""
    app = console(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await app.push_screen(
            TrainConfirmScreen(store, base_model="tiny", data_dir=tmp_path / "data")
        )
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TrainConfirmScreen)
        visible = screen.region
        problem = screen.query_one("#train-problem", Static)
        queue = screen.query_one("#train-queue", Button)
        assert "needs at least 1 example" in plain(problem)
        assert visible.contains_region(problem.region) and problem.region.height >= 2
        assert visible.contains_region(queue.region) and queue.region.height == 1
        assert queue.disabled  # nothing to train on: greyed, as the footer's ctrl+s is

        rank = screen.query_one("#train-lora-r", Input)
        assert not visible.contains_region(rank.region)  # below the fold at first
        rank.focus()  # as tab reaches it
        await settle(pilot)
        assert visible.contains_region(rank.region)
        assert not rank.region.overlaps(problem.region)
        assert visible.contains_region(queue.region)
        await pilot.click("#train-cancel")
        assert not isinstance(app.screen, TrainConfirmScreen)


async def test_the_footer_keeps_the_keys_that_work_while_the_chat_input_has_focus(
    store: TraceStore,
) -> None:
    build_main_trace(store)
    app = console(store)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("i")
        assert isinstance(app.focused, ChatInput)
        shown = {
            key: active.binding.description
            for key, active in app.screen.active_bindings.items()
            if active.binding.show
        }
        assert {"escape", "ctrl+q", "f1"} <= set(shown), shown
        # `/` types a slash there: the footer must not offer it as Search.
        assert "slash" not in shown, shown
        await pilot.press("slash", "escape")
        assert isinstance(app.focused, TraceTree)
        assert app.main.query_one(ChatInput).value == "/"


async def test_the_chosen_training_kind_shows_without_colour(
    store: TraceStore, tmp_path: Path
) -> None:
    app = console(store)
    async with app.run_test(size=(100, 40)) as pilot:
        await settle(pilot)
        await app.push_screen(
            TrainConfirmScreen(store, base_model="tiny", data_dir=tmp_path / "data")
        )
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, TrainConfirmScreen)
        screen.query_one("#train-base", Input).focus()  # no cursor in the radio set
        sft = screen.query_one("#train-kind-sft", RadioButton)
        await pilot.pause()
        chosen = without_colour(sft)
        await pilot.press("ctrl+t")  # DPO
        await settle(pilot)
        assert not sft.value
        assert without_colour(sft) != chosen
