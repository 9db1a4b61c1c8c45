"""A/B in the console: the same task on the base model and with an adapter, side by side,
on the real tiny model with a real LoRA adapter and the real sandbox; both sessions stay
in the store; the verdict names the side the callbacks and the evaluator prefer.

Also the parts under it: `PinnedAdapter` (two sides on one backend at once, each call with
its own adapter) and the judging rules on hand-built sessions.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, RichLog, Static

from agents.backends.pinned import PinnedAdapter
from agents.backends.transformers_backend import TransformersBackend
from agents.runtime import task_snapshot
from agents.settings import Settings
from agents.tasks.families import split
from app import exit_codes
from app.console import ConsoleApp
from app.dialogs import AdapterPicker
from app.screens.compare import CompareScreen
from app.screens.held_out import HeldOutScreen
from app.widgets.status_bar import StatusBar
from app.widgets.trace_tree import TraceTree
from storage import NodeStatus, SessionStatus, TraceStore
from tests.support.answer_task import TASK
from tests.support.label_trees import SessionBuilder
from tests.support.pilot import Notes, plain, until
from training.ab import (
    BASE,
    TUNED,
    SideSummary,
    held_out_variants,
    judge,
    resolve_task,
    summarize,
)

pytestmark = pytest.mark.timeout(300)
SIZE = (140, 44)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path, tiny_adapter_dir: Path) -> Iterator[TransformersBackend]:
    loaded = TransformersBackend(str(tiny_model_dir))
    loaded.load_adapter("tuned", str(tiny_adapter_dir))
    yield loaded
    loaded.close()


def settings(model: Path) -> Settings:
    return Settings(
        backend="transformers",
        model=str(model),
        approval="ask",  # the comparison runs with `auto` whatever the console's policy
        candidates=1,  # one short candidate a block: the comparison is under test
        escalation=(),
        block_tokens=24,
        temperature=1.0,
        max_ticks=1,
        action_timeout=10.0,
    )


async def open_a_b(pilot: Pilot[None], app: ConsoleApp) -> CompareScreen:
    """Once the model is in: `A`, the first adapter in the picker, the comparison screen."""
    await until(pilot, lambda: app.workbench.backend is not None, "the model")
    await until(pilot, lambda: app.main.check_action("compare", ()) is True, "A/B")
    await pilot.press("A")
    await until(pilot, lambda: isinstance(app.screen, AdapterPicker), "the picker")
    picker = app.screen
    assert isinstance(picker, AdapterPicker)
    await until(pilot, lambda: bool(picker.adapters), "the adapters")
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, CompareScreen), "the comparison")
    screen = app.screen
    assert isinstance(screen, CompareScreen)
    return screen


# -- the screen ------------------------------------------------------------------------------------


async def test_a_b_runs_both_sides_to_an_end_and_shows_a_verdict(
    store: TraceStore, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    store.register_adapter("tuned", base_model=str(tiny_model_dir), path=tiny_adapter_dir)
    # A stored session of the task: the tree's cursor starts on it.
    earlier = store.create_session(
        TASK.prompt, title=TASK.title, settings={"task": task_snapshot(TASK)}
    )
    notes = Notes()
    app = ConsoleApp(store=store, settings=settings(tiny_model_dir))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        screen = await open_a_b(pilot, app)
        assert screen.agent_task.prompt == TASK.prompt and screen.adapter == "tuned"
        await until(pilot, lambda: screen.sides != {}, "both sides to start")
        # While it runs the model is the comparison's: no session from the main screen.
        assert app.workbench.comparing
        app.main.start_session(TASK)
        assert app.main.live is None
        await pilot.pause()
        assert "an A/B comparison is using the model" in notes.text()

        await until(pilot, lambda: screen.verdict is not None, "the verdict", timeout=180)
        assert not app.workbench.comparing and not screen.running.is_set()
        assert screen.summaries is not None
        base, tuned = screen.summaries
        ids = {base.session_id, tuned.session_id}
        assert len(ids) == 2 and earlier.id not in ids
        # Both sessions are ordinary stored sessions, marked with what sampled them.
        assert store.get_session(base.session_id).adapter is None
        assert store.get_session(tuned.session_id).adapter == "tuned"
        for summary in (base, tuned):
            session = store.get_session(summary.session_id)
            assert session.status in (SessionStatus.COMPLETED, SessionStatus.TRUNCATED)
            assert session.settings["run"]["approval"] == "auto"
            assert session.task == TASK.prompt
            assert summary == summarize(store, summary.session_id)
            # The task's check ran once per tick on each side.
            assert summary.callbacks_total >= 1 and summary.blocks >= 1
        # The seed is shared, so the adapter is the only difference between the sides.
        seeds = {store.get_session(i).settings["run"]["seed"] for i in ids}
        assert len(seeds) == 1
        assert screen.verdict == judge(base, tuned)

        verdict = plain(screen.query_one("#compare-verdict", Static))
        assert "evaluation callbacks" in verdict and "logit evaluator" in verdict
        assert "preferred:" in verdict
        assert f"sessions {base.session_id} and {tuned.session_id}" in verdict
        for key in (BASE, TUNED):
            log = screen.query_one(f"#compare-{key} .compare-log", RichLog)
            assert any("tick 1 action" in "".join(s.text for s in line) for line in log.lines)
        # The console's own adapter is as it was: the sides switched only per call.
        assert app.workbench.backend is not None and app.workbench.backend.active_adapter is None
        assert app.main.query_one(StatusBar).adapter == ""
        # each side counts its ticks against the limit (there was no progress counter)
        limit = screen.sides[BASE].live.runtime.options.max_ticks
        for key in (BASE, TUNED):
            head = plain(screen.query_one(f"#compare-{key} .compare-head", Static))
            assert f"tick {screen.sides[key].tick} of {limit}" in head, head

        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main
        # its two sessions are in the tree without `r` (they needed it before)
        tree = app.main.query_one(TraceTree)
        await until(pilot, lambda: ids <= set(tree.session_nodes), "the sessions in the tree")


async def test_an_ending_signal_stops_both_sides_stored_aborted_with_its_name(
    store: TraceStore, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    """SIGTERM during an A/B: both sides stored `aborted`, "stopped by SIGTERM", before
    the console exits 130 (before, only the main screen's live session was stopped and
    the sides stayed `running`)."""
    store.register_adapter("tuned", base_model=str(tiny_model_dir), path=tiny_adapter_dir)
    earlier = store.create_session(
        TASK.prompt, title=TASK.title, settings={"task": task_snapshot(TASK)}
    )
    # ten ticks: still running when the signal comes
    app = ConsoleApp(
        store=store, settings=settings(tiny_model_dir).model_copy(update={"max_ticks": 10})
    )
    async with app.run_test(size=SIZE) as pilot:
        await open_a_b(pilot, app)

        def running() -> list[int]:
            listed = store.list_sessions(status=SessionStatus.RUNNING)
            return [s.id for s in listed if s.id != earlier.id]

        await until(pilot, lambda: len(running()) == 2, "both sides running", timeout=120)
        sides = running()
        app.end_by_signal(signal.SIGTERM)
        await until(pilot, lambda: app.return_code is not None, "the exit", timeout=60)
    assert app.return_code == exit_codes.INTERRUPTED
    for session_id in sides:
        session = store.get_session(session_id)
        assert session.status is SessionStatus.ABORTED, session
        assert session.status_reason == "stopped by SIGTERM", session


async def test_a_b_needs_a_model_and_a_task(store: TraceStore) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        assert app.main.check_action("compare", ()) is False  # not in the footer
        await app.main.run_action("compare")
        await pilot.pause()
        assert app.screen is app.main
        assert "no model" in notes.text()


# -- one model, two adapters at once ------------------------------------------------------------


def test_pinned_sides_each_use_their_own_adapter_while_running_at_once(
    backend: TransformersBackend,
) -> None:
    prompts = ["#q: Is the sky blue? ", "#q: Is seven even? "]
    backend.use_adapter(None)
    plain_odds = backend.score_yes_no(prompts)
    backend.use_adapter("tuned")
    tuned_odds = backend.score_yes_no(prompts)
    backend.use_adapter(None)
    assert plain_odds != tuned_odds  # the adapter changes the model

    lock = threading.Lock()
    sides = {
        None: PinnedAdapter(backend, None, lock),
        "tuned": PinnedAdapter(backend, "tuned", lock),
    }
    expected = {None: plain_odds, "tuned": tuned_odds}
    wrong: list[str] = []

    def hammer(adapter: str | None) -> None:
        side = sides[adapter]
        for _ in range(15):
            got = side.score_yes_no(prompts)
            if got != pytest.approx(expected[adapter], abs=1e-4):
                wrong.append(f"{adapter}: {got}")

    threads = [threading.Thread(target=hammer, args=(a,)) for a in (None, "tuned")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
    assert backend.active_adapter is None  # put back after every call
    assert sides["tuned"].active_adapter == "tuned" and sides[None].active_adapter is None
    assert sides["tuned"].name == "transformers" and sides["tuned"].model == backend.model


# -- judging ---------------------------------------------------------------------------------------


def summary(passed: int, total: int, odds: float | None) -> SideSummary:
    return SideSummary(1, None, SessionStatus.COMPLETED, passed, total, odds, 3)


def test_callbacks_decide_and_the_evaluator_breaks_ties() -> None:
    verdict = judge(summary(0, 2, 1.5), summary(2, 2, -1.0))
    assert (verdict.callbacks, verdict.evaluator, verdict.overall) == (TUNED, BASE, TUNED)
    verdict = judge(summary(1, 2, -0.5), summary(1, 2, 0.25))
    assert (verdict.callbacks, verdict.evaluator, verdict.overall) == (None, TUNED, TUNED)
    verdict = judge(summary(0, 0, None), summary(0, 0, None))
    assert verdict.overall is None


def test_a_side_is_summarised_from_its_stored_session(store: TraceStore) -> None:
    builder = SessionBuilder(store, "side")
    builder.block("orientation", "# what next", tick=1, score_parts={"evaluator": 1.0})
    parent = builder.last
    builder.block(
        "action", "x = 1", tick=1, status=NodeStatus.EXECUTED, score_parts={"evaluator": 2.0}
    )
    builder.block(
        "action",
        "x = 2",
        tick=1,
        parent=parent,
        advance=False,
        status=NodeStatus.ALTERNATE,
        score_parts={"evaluator": -5.0},
    )
    builder.finish(1, {"check": True, "other": False})
    builder.finish(2, {"check": "boom"})
    result = summarize(store, builder.id)
    assert (result.callbacks_passed, result.callbacks_total) == (1, 3)
    # The blocks the model wrote on the path count; the alternate (off it) does not.
    assert result.blocks == 2 and result.mean_log_odds == 1.5


def test_the_task_of_a_stored_session() -> None:
    assert resolve_task({"task": task_snapshot(TASK)}, TASK.prompt).checks == TASK.checks
    assert resolve_task({}, "say hello").prompt == "say hello"


async def test_a_held_out_set_runs_each_variant_on_both_sides_with_one_seed(
    store: TraceStore, tiny_model_dir: Path, tiny_adapter_dir: Path
) -> None:
    store.register_adapter("tuned", base_model=str(tiny_model_dir), path=tiny_adapter_dir)
    variants = held_out_variants(1)[:1]
    assert all(v.seed in split(v.family)[1] for v in held_out_variants())
    app = ConsoleApp(store=store, settings=settings(tiny_model_dir))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.workbench.backend is not None, "the model")
        # the palette's way in: the adapter picker first
        app.main.action_compare_held_out()
        await until(pilot, lambda: isinstance(app.screen, AdapterPicker), "the picker")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, "back")

        screen = HeldOutScreen("tuned", variants)
        await app.push_screen(screen)
        await until(pilot, lambda: app.workbench.comparing, "the set to start")
        await until(
            pilot,
            lambda: not screen.running.is_set() and all(len(r.results) == 2 for r in screen.rows),
            "every variant on both sides",
            timeout=240,
        )
        assert not app.workbench.comparing
        sessions = sorted(store.list_sessions(), key=lambda s: s.id)
        assert len(sessions) == 2
        for pair, found in zip((sessions[0:2],), variants, strict=True):
            base, tuned = pair
            assert base.adapter is None and tuned.adapter == "tuned"
            assert base.task == tuned.task == found.task.prompt
            assert base.settings["run"]["seed"] == tuned.settings["run"]["seed"]
            assert base.settings["run"]["approval"] == "auto"
        # the end line comes once the worker's end reaches the screen
        await until(
            pilot,
            lambda: "done" in plain(screen.query_one("#compare-verdict", Static)),
            "the end line",
        )
        verdict = plain(screen.query_one("#compare-verdict", Static))
        solved = [r.results for r in screen.rows]
        for key, name in ((BASE, "base model"), (TUNED, "adapter tuned")):
            k = sum(r[key] for r in solved)
            assert f"{name}  {k}/1 solved  (95% CI" in verdict
        table = screen.query_one(DataTable)
        assert table.row_count == 1
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.main
