"""The improvement screen over a real store: runs, the plot of each round's held-out pass
rate, the rounds table, and `p` promoting a round's adapter by hand."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import DataTable, Static

from app.messages import UseAdapter
from app.screens.improve import ImproveScreen
from storage import TraceStore
from tests.support.pilot import Notes, plain, settle

SIZE = (80, 24)


def state() -> dict[str, object]:
    """Two rounds: the first kept as data, the second promoted; the base measured."""
    return {
        "adapter": "improve1-r2",
        "held_out": {
            "base": {"adapter": "base", "batch": 2, "passed": 1, "n": 10},
            "improve1-r1": {"adapter": "improve1-r1", "batch": 3, "passed": 2, "n": 10},
            "improve1-r2": {"adapter": "improve1-r2", "batch": 5, "passed": 9, "n": 10},
        },
        "rounds": [
            {"round": 1, "batch": 1,
             "rollouts": {"solved": 2, "n": 8, "tokens": 900, "seconds": 30.0},
             "labels": {"good": 2, "bad": 6}, "train": {"adapter": "improve1-r1", "seconds": 9.0},
             "evaluate": {"current": {"adapter": "base", "batch": 2, "passed": 1, "n": 10},
                          "candidate": {"adapter": "improve1-r1", "batch": 3, "passed": 2, "n": 10}},
             "verdict": "kept as data: base stays"},
            {"round": 2, "batch": 4,
             "rollouts": {"solved": 5, "n": 8, "tokens": 950, "seconds": 31.0},
             "labels": {"good": 5, "bad": 3}, "train": {"adapter": "improve1-r2", "seconds": 9.5},
             "evaluate": {"current": {"adapter": "base", "batch": 2, "passed": 1, "n": 10},
                          "candidate": {"adapter": "improve1-r2", "batch": 5, "passed": 9, "n": 10}},
             "verdict": "promoted"},
        ],
    }  # fmt: skip


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "t.db") as opened:
        opened.create_improvement("compute", config={"rounds": 3}, state=state())
        yield opened


class Host(App[None]):
    def __init__(self, store: TraceStore) -> None:
        super().__init__()
        self.store = store
        self.used: list[str | None] = []

    def on_mount(self) -> None:
        self.push_screen(ImproveScreen(self.store))

    def on_use_adapter(self, message: UseAdapter) -> None:
        self.used.append(message.name)


async def test_the_plot_and_the_rounds_at_80x24(store: TraceStore) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ImproveScreen)
        shown = plain(screen.query_one("#improve-plot", Static))
        assert "base     ▕██░░░░░░░░░░░░░░░░░░▏ 0.10 (0.02-0.40) 1/10" in shown
        assert "round 1  ▕████░░░░░░░░░░░░░░░░▏ 0.20 (0.06-0.51) 2/10  improve1-r1" in shown
        assert "0.90 (0.60-0.98) 9/10  improve1-r2 ✔ promoted" in shown
        rounds = screen.query_one("#improve-rounds", DataTable)
        assert rounds.row_count == 2
        assert rounds.get_row_at(0)[-1] == "kept as data: base stays"
        runs = screen.query_one("#improve-runs", DataTable)
        assert runs.get_row_at(0) == ["1", "compute", "running", "2/3", "improve1-r2"]
        region = screen.query_one("#improve-rounds").region
        assert region.bottom <= SIZE[1] - 1  # above the footer, on screen


async def test_p_promotes_the_highlighted_rounds_adapter(store: TraceStore) -> None:
    notes = Notes()
    app = Host(store)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(pilot)
        screen = app.screen
        rounds = screen.query_one("#improve-rounds", DataTable)
        rounds.focus()
        rounds.move_cursor(row=0)
        await pilot.press("p")
        await settle(pilot)
        for _ in range(20):
            if app.used:
                break
            await pilot.pause(0.05)
        assert app.used == ["improve1-r1"]
        run = store.get_improvement(1)
        assert run.state["adapter"] == "improve1-r1"
        assert run.state["rounds"][0]["promoted_by_hand"] is True
        assert "round 1's adapter improve1-r1 promoted" in notes.text()


async def test_no_runs_says_how_to_start_one(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "empty.db") as empty:
        app = Host(empty)
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            shown = plain(app.screen.query_one("#improve-plot", Static))
            assert "agent-console improve --family NAME" in shown
