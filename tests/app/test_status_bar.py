"""The status bar at 80 columns: the session and its mode (which says when a decision
waits) stay; the parts least needed go first. Before, "action waits: d decides" fell off
the end of the line."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult

from app.widgets.status_bar import StatusBar

MODEL = "/root/.local/share/agent-console/models/qwen2.5-coder-0.5b"


class Host(App[None]):
    def compose(self) -> ComposeResult:
        yield StatusBar()


@pytest.mark.parametrize("width", [80, 160])
async def test_the_mode_stays_in_sight_and_the_rest_fits(width: int) -> None:
    app = Host()
    async with app.run_test(size=(width, 10)) as pilot:
        bar = app.query_one(StatusBar)
        bar.backend, bar.model, bar.policy = "transformers", MODEL, "ask"
        bar.session = "session 12 waiting"
        bar.mode = "run · action #31 waits: d decides"
        await pilot.pause()
        line = str(bar.render())
        assert line.endswith("session 12 waiting · run · action #31 waits: d decides") or (
            "no training job" in line
        ), line
        assert "action #31 waits: d decides" in line and len(line) <= width, line
        if width == 160:  # room for everything
            assert line.startswith("transformers qwen2.5-coder-0.5b (offline, instruct) · adapter")
            assert line.endswith("· no training job")
        else:  # the job and the model went first
            assert "no training job" not in line and "qwen" not in line
            assert line.startswith("transformers")
