"""The idle collector with the interpreter's real collector: full collections wait for a
quiet operator, never longer than LONGEST, and the thresholds come back afterwards."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.settings import Settings
from app import collector
from app.collector import IdleCollector
from app.console import ConsoleApp
from storage import TraceStore


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Cycle:
    """Garbage only a full collection frees: it refers to itself."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def idle(clock: Clock) -> Iterator[IdleCollector]:
    saved = gc.get_threshold()
    made = IdleCollector(clock)
    made.start()
    try:
        yield made
    finally:
        made.stop()
        assert gc.get_threshold() == saved


def owe_a_full_collection() -> weakref.ref[Cycle]:
    """A cycle in the oldest generation, and as many young collections as the
    interpreter waits for before collecting that generation."""
    garbage = Cycle()
    gc.collect(1)  # into the oldest generation, alive
    gone = weakref.ref(garbage)
    del garbage
    for _ in range(collector.FULL_EVERY):
        gc.collect(1)
    return gone


def test_full_collections_are_put_off_and_the_thresholds_restored(clock: Clock) -> None:
    saved = gc.get_threshold()
    idle = IdleCollector(clock)
    idle.start()
    try:
        assert gc.get_threshold() == (saved[0], saved[1], collector.DEFERRED)
    finally:
        idle.stop()
    assert gc.get_threshold() == saved
    assert not idle.tick()  # stopped: it never collects


def test_it_collects_once_the_operator_is_quiet(clock: Clock, idle: IdleCollector) -> None:
    gone = owe_a_full_collection()
    assert gone() is not None and gc.get_count()[2] >= collector.FULL_EVERY
    idle.touched()
    clock.now += collector.QUIET / 2
    assert not idle.tick() and gone() is not None  # typing: not now
    clock.now += collector.QUIET
    assert idle.tick()
    assert gone() is None and idle.runs == 1
    assert not idle.tick()  # nothing owed any more


def test_nothing_owed_nothing_collected(clock: Clock, idle: IdleCollector) -> None:
    gc.collect()
    clock.now += 10 * collector.QUIET
    assert not idle.due() and not idle.tick() and idle.runs == 0


def test_an_operator_who_never_stops_waits_at_most_longest(
    clock: Clock, idle: IdleCollector
) -> None:
    gone = owe_a_full_collection()
    for _ in range(int(collector.LONGEST / 0.1) - 1):
        clock.now += 0.1
        idle.touched()
        assert not idle.tick()
    clock.now += 0.2
    idle.touched()
    assert idle.tick() and gone() is None


async def test_the_console_runs_it_and_keys_count_as_input(tmp_path: Path) -> None:
    saved = gc.get_threshold()
    with TraceStore(tmp_path / "traces.db") as store:
        app = ConsoleApp(store=store, settings=Settings(backend="none"))
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            assert app.collector.active
            assert gc.get_threshold()[2] == collector.DEFERRED
            before = app.collector.last_input
            await pilot.press("down")
            assert app.collector.last_input > before
            # owed and quiet: the app's own timer collects
            gone = owe_a_full_collection()
            app.collector.last_input -= collector.QUIET
            await pilot.pause(3 * collector.EVERY)
            assert gone() is None and app.collector.runs >= 1
    assert gc.get_threshold() == saved
