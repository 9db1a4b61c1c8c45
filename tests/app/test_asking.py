"""The live session's approval requests as the operator meets them (`app.screens.asking`):
one at a time, set aside with escape and taken up again with `d`, held while paused.

The host app stands where the main screen does: it owns the queue and says whether the
session is paused; the panels are the real approval screens over a real store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.app import App

from agents.approval import ApprovalRequest, Verdict
from app.screens.approval import ApprovalScreen
from app.screens.asking import Asking
from storage import TraceStore
from tests.app.snapshot_apps.approval_app import build_approval_request

SIZE = (100, 30)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "t.db") as opened:
        yield opened


class Owner(App[None]):
    def __init__(self) -> None:
        super().__init__()
        self.asking = Asking(self)
        self.is_paused = False
        self.notes: list[str] = []
        self.stops = 0

    @property
    def paused(self) -> bool:
        return self.is_paused

    @property
    def app(self) -> App[None]:  # type: ignore[override]
        return self

    def decision_pending(self, note: str) -> None:
        self.notes.append(note)

    def decided(self, *, stop: bool) -> None:
        self.stops += stop


def shown(app: Owner) -> ApprovalRequest | None:
    screen = app.screen
    return screen.request if isinstance(screen, ApprovalScreen) else None


async def test_one_request_at_a_time_in_order(store: TraceStore) -> None:
    first, second = build_approval_request(store), build_approval_request(store)
    app = Owner()
    async with app.run_test(size=SIZE) as pilot:
        app.asking.arrived(first)
        app.asking.arrived(second)
        await pilot.pause()
        assert shown(app) is first and app.asking.waiting == [second]
        await pilot.press("a")
        await pilot.pause()
        assert first.future.result().verdict is Verdict.APPROVE
        assert shown(app) is second


async def test_escape_sets_it_aside_and_take_up_brings_it_back(store: TraceStore) -> None:
    request = build_approval_request(store)
    app = Owner()
    async with app.run_test(size=SIZE) as pilot:
        app.asking.arrived(request)
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert shown(app) is None and not request.future.done()
        assert app.asking.busy and app.asking.can_take_up
        assert app.notes[-1] == f"action #{request.action.id} waits: d decides"
        # Another request arriving meanwhile waits behind the one set aside.
        later = build_approval_request(store)
        app.asking.arrived(later)
        await pilot.pause()
        assert shown(app) is None
        assert app.asking.take_up()
        await pilot.pause()
        assert shown(app) is request
        await pilot.press("a")
        await pilot.pause()
        assert request.future.result().verdict is Verdict.APPROVE
        assert shown(app) is later and not app.asking.can_take_up


async def test_pause_holds_the_next_proposal_until_resumed(store: TraceStore) -> None:
    request = build_approval_request(store)
    app = Owner()
    async with app.run_test(size=SIZE) as pilot:
        app.is_paused = True
        app.asking.arrived(request)
        await pilot.pause()
        assert shown(app) is None  # held: the status bar says so
        assert app.notes[-1] == f"action #{request.action.id} waits: p resumes, d decides now"
        assert app.asking.can_take_up
        app.is_paused = False
        app.asking.next()  # what resuming does
        await pilot.pause()
        assert shown(app) is request


async def test_d_asks_even_while_paused(store: TraceStore) -> None:
    request = build_approval_request(store)
    app = Owner()
    async with app.run_test(size=SIZE) as pilot:
        app.is_paused = True
        app.asking.arrived(request)
        assert app.asking.take_up()
        await pilot.pause()
        assert shown(app) is request


async def test_close_takes_the_panel_down_and_forgets_the_rest(store: TraceStore) -> None:
    first, second = build_approval_request(store), build_approval_request(store)
    app = Owner()
    async with app.run_test(size=SIZE) as pilot:
        app.asking.arrived(first)
        app.asking.arrived(second)
        await pilot.pause()
        app.asking.close()
        await pilot.pause()
        assert shown(app) is None and not app.asking.busy
        assert not first.future.done() and app.stops == 0


async def test_x_in_the_panel_asks_the_owner_to_stop(store: TraceStore) -> None:
    request = build_approval_request(store)
    app = Owner()
    async with app.run_test(size=SIZE) as pilot:
        app.asking.arrived(request)
        await pilot.pause()
        await pilot.press("x")
        await pilot.pause()
        assert app.stops == 1 and shown(app) is None and not app.asking.busy
