"""The console app, driven headless by Pilot against a real SQLite store."""

from __future__ import annotations

import html
import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from textual.notifications import Notification, Notify
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from agents.settings import Settings
from app.console import FALLBACK_THEME, BlockEntry, BlockView, ConsoleApp, SessionEntry
from storage import NewNode, Node, NodeStatus, TraceStore

SIZE = (120, 40)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "traces.db"


@pytest.fixture
def store(db: Path) -> Iterator[TraceStore]:
    with TraceStore(db) as opened:
        yield opened


class Filled:
    """Two sessions; the first (created first, updated last) has blocks over 2 ticks."""

    def __init__(self, store: TraceStore) -> None:
        self.first = store.create_session("fix the failing test\nin detail", backend="x")
        self.second = store.create_session("", title="Second session")
        nodes = store.add_nodes(
            self.first.id,
            [
                NewNode("observation", "the repo has 3 files", tick=0),
                NewNode(
                    "action",
                    "print('hello')\nx = 1",
                    tick=0,
                    parent_index=0,
                    status=NodeStatus.APPROVED,
                    score=0.75,
                    score_parts={"tests": 0.5, "style": 0.25},
                ),
                NewNode(
                    "action", "print('other')", tick=0, parent_index=0, status=NodeStatus.ALTERNATE
                ),
                NewNode("action", "run_tests()", tick=1, parent_index=1, status="executed"),
                NewNode("debug", "why did it fail?", tick=1, parent_index=3, status="failed"),
            ],
        )
        self.observation, self.action, self.alternate, self.good, self.bad = nodes
        store.add_label(self.good.id, "good")
        store.add_label(self.bad.id, "bad", note="wrong guess")


@pytest.fixture
def filled(store: TraceStore) -> Filled:
    return Filled(store)


class Notes:
    """Every notification the app posts, caught with run_test's public message_hook."""

    def __init__(self) -> None:
        self.all: list[Notification] = []

    def __call__(self, message: object) -> None:
        if isinstance(message, Notify):
            self.all.append(message.notification)

    def of(self, severity: str) -> list[str]:
        return [n.message for n in self.all if n.severity == severity]


async def _settle(app: ConsoleApp, pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


def _tree(app: ConsoleApp) -> Tree:
    return app.query_one("#trace-tree", Tree)


def _visible(app: ConsoleApp) -> list[str]:
    """The tree's visible lines, indented by depth, in display order."""
    lines: list[str] = []

    def walk(node: TreeNode, depth: int) -> None:
        for child in node.children:
            lines.append("  " * depth + child.label.plain)
            if child.is_expanded:
                walk(child, depth + 1)

    walk(_tree(app).root, 0)
    return lines


def _shown(app: ConsoleApp) -> str:
    """BlockView's content as plain text, rendered the way Rich would draw it."""
    console = Console(width=100, file=io.StringIO(), color_system=None)
    with console.capture() as captured:
        console.print(app.query_one(BlockView).content)
    return captured.get()


def _line_of(app: ConsoleApp, node: Node) -> int:
    def find(tree_node: TreeNode) -> TreeNode | None:
        for child in tree_node.children:
            data = child.data
            if isinstance(data, BlockEntry) and data.node.id == node.id:
                return child
            found = find(child)
            if found is not None:
                return found
        return None

    target = find(_tree(app).root)
    assert target is not None, f"block {node.id} is not in the tree"
    return target.line


# -- browsing -----------------------------------------------------------------------------


async def test_sessions_are_listed_newest_updated_first(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        assert _visible(app) == [
            f"#{filled.first.id} fix the failing test  running",
            f"#{filled.second.id} Second session  running",
        ]
        tree = _tree(app)
        assert tree.has_focus
        assert tree.cursor_line == 0
        assert isinstance(tree.cursor_node.data, SessionEntry)
        assert tree.cursor_node.data.session.id == filled.first.id
        assert app.sub_title == store.where
        assert "Select a block" in _shown(app)
        # lazy: nothing below a session is loaded before it is expanded
        assert all(not node.children for node in tree.root.children)


async def test_expanding_a_session_loads_its_ticks_and_blocks(
    store: TraceStore, filled: Filled
) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        await pilot.press("space")
        await _settle(app, pilot)
        assert _visible(app) == [
            f"#{filled.first.id} fix the failing test  running",
            "  tick 0",
            "    observation  the repo has 3 files",
            "    ✔ action  print('hello')",
            "    ⋯ action  print('other')",
            "  tick 1",
            "    + action  run_tests()",
            "    - ! debug  why did it fail?",
            f"#{filled.second.id} Second session  running",
        ]
        # collapsing and expanding again does not load (or add) the blocks twice
        await pilot.press("space")
        await pilot.press("space")
        await _settle(app, pilot)
        assert len(_visible(app)) == 9


async def test_a_session_without_blocks_says_so(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        await pilot.press("down", "space")
        await _settle(app, pilot)
        assert _visible(app)[-1] == "  no blocks"


async def test_the_selected_action_block_is_shown(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        await pilot.press("space")
        await _settle(app, pilot)
        line = _line_of(app, filled.action)
        assert line == 3
        await pilot.press(*["down"] * line)
        await pilot.pause()
        cursor = _tree(app).cursor_node
        assert isinstance(cursor.data, BlockEntry) and cursor.data.node.id == filled.action.id
        shown = _shown(app)
        head, _, *body = shown.splitlines()
        assert head == (
            f"#{filled.action.id} action · tick 0 · approved · score +0.75 "
            "(tests +0.50, style +0.25)"
        )
        assert [b.rstrip() for b in body] == ["print('hello')", "x = 1"]


async def test_labels_show_in_the_block_view_too(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        await pilot.press("space")
        await _settle(app, pilot)
        await pilot.press(*["down"] * _line_of(app, filled.bad))
        await pilot.pause()
        head = _shown(app).splitlines()[0]
        assert head == f"#{filled.bad.id} debug · tick 1 · failed · labelled bad"
        await pilot.press("up")
        await pilot.pause()
        assert _shown(app).splitlines()[0].endswith("executed · labelled good")
        await pilot.press("up")  # the "tick 1" line: nothing selected
        await pilot.pause()
        assert "Select a block" in _shown(app)


async def test_the_screen_shows_the_tree_and_the_block(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        await pilot.press("space")
        await _settle(app, pilot)
        await pilot.press(*["down"] * _line_of(app, filled.action))
        await pilot.pause()
        svg = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        for expected in ("Second", "tick", "observation", "score", "+0.75", "approved"):
            assert expected in svg


async def test_an_empty_store(store: TraceStore) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        assert _visible(app) == ["no sessions yet"]
        await pilot.press("space", "down", "enter")
        await pilot.pause()
        assert "Select a block" in _shown(app)


async def test_r_reloads_the_sessions(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        assert len(_visible(app)) == 2
        added = store.create_session("a third task")
        assert len(_visible(app)) == 2  # not before asked
        await pilot.press("r")
        await _settle(app, pilot)
        assert _visible(app)[0] == f"#{added.id} a third task  running"
        assert len(_visible(app)) == 3


async def test_r_on_an_empty_store_then_filled(store: TraceStore) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        assert _visible(app) == ["no sessions yet"]
        store.create_session("now there is one", title="One")
        await pilot.press("r")
        await _settle(app, pilot)
        assert [line.split("  ")[0] for line in _visible(app)] == ["#1 One"]


# -- themes -------------------------------------------------------------------------------


async def test_the_default_theme_is_applied(store: TraceStore) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await _settle(app, pilot)
        assert app.theme == "agent-console"
        assert app.current_theme.primary.upper() == "#4EA1D3"
        assert app.current_theme.background.upper() == "#14171C"
        assert notes.all == []


async def test_an_unknown_theme_falls_back_with_an_error(store: TraceStore) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none", theme="no-such-theme"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await _settle(app, pilot)
        assert app.theme == FALLBACK_THEME == "textual-dark"
        assert notes.of("error") == ["unknown theme 'no-such-theme'; using textual-dark"]
        assert _visible(app) == ["no sessions yet"]


async def test_a_builtin_textual_theme_by_name(store: TraceStore) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none", theme="nord"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await _settle(app, pilot)
        assert app.theme == "nord"
        assert notes.all == []


async def test_a_theme_file_in_the_config_folder_can_be_chosen(
    store: TraceStore, tmp_path: Path
) -> None:
    folder = tmp_path / "config" / "agent-console" / "themes"
    folder.mkdir(parents=True)
    (folder / "mine.toml").write_text('name = "mine"\nprimary = "#123456"\n', encoding="utf-8")
    app = ConsoleApp(store=store, settings=Settings(backend="none", theme="mine"))
    async with app.run_test(size=SIZE) as pilot:
        await _settle(app, pilot)
        assert app.theme == "mine"
        assert app.current_theme.primary == "#123456"


async def test_broken_theme_files_warn_and_the_app_still_opens(
    store: TraceStore, filled: Filled, tmp_path: Path
) -> None:
    folder = tmp_path / "config" / "agent-console" / "themes"
    folder.mkdir(parents=True)
    (folder / "bad-toml.toml").write_text("name = \n", encoding="utf-8")
    (folder / "bad-colour.toml").write_text('name = "b"\nprimary = 12\n', encoding="utf-8")
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await _settle(app, pilot)
        warnings = notes.of("warning")
        assert len(warnings) == 2
        assert any(str(folder / "bad-toml.toml") in w for w in warnings)
        assert f"theme file {folder / 'bad-colour.toml'} skipped: primary = 12 is not a colour" in (
            warnings
        )
        assert notes.of("error") == []
        assert app.theme == "agent-console"
        assert len(_visible(app)) == 2


# -- failures in the store workers --------------------------------------------------------


def _drop(db: Path, table: str) -> None:
    conn = sqlite3.connect(db)
    try:
        conn.execute(f'DROP TABLE "{table}"')
        conn.commit()
    finally:
        conn.close()


async def test_a_failed_reload_is_reported_and_the_app_keeps_running(
    store: TraceStore, filled: Filled, db: Path
) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await _settle(app, pilot)
        before = _visible(app)
        _drop(db, "session")
        await pilot.press("r")
        await _settle(app, pilot)
        errors = notes.of("error")
        assert len(errors) == 1
        assert errors[0].startswith("load_sessions failed: ")
        assert "no such table: session" in errors[0]
        assert "\n" not in errors[0] and "SELECT" not in errors[0]  # the cause, not the SQL
        assert app.is_running
        assert _visible(app) == before  # the old list stays
        await pilot.press("down")
        await pilot.pause()
        assert _tree(app).cursor_line == 1  # still responds to keys


async def test_a_failed_block_load_is_reported_and_the_app_keeps_running(
    store: TraceStore, filled: Filled, db: Path
) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await _settle(app, pilot)
        _drop(db, "label")
        await pilot.press("space")
        await _settle(app, pilot)
        errors = notes.of("error")
        assert len(errors) == 1
        assert errors[0].startswith("load_blocks failed: ")
        assert "label" in errors[0]
        assert app.is_running
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


# -- text from users and errors is shown as text, never parsed as markup ------------------


async def test_bracketed_text_in_notifications_and_titles_is_shown_literally(
    store: TraceStore, tmp_path: Path
) -> None:
    folder = tmp_path / "config" / "agent-console" / "themes"
    folder.mkdir(parents=True)
    (folder / "odd.toml").write_text('name = "odd"\nprimary = "red"\n"[/]" = 1\n', "utf-8")
    session = store.create_session("task", title="[bold]x[/] [/]")
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none", theme="[/red]"))
    # notifications=True: the toasts are really rendered, as they are outside tests
    async with app.run_test(size=SIZE, notifications=True, message_hook=notes) as pilot:
        await _settle(app, pilot)
        await pilot.pause(0.2)
        assert app.is_running
        assert app.theme == FALLBACK_THEME
        assert notes.of("error") == ["unknown theme '[/red]'; using textual-dark"]
        assert notes.of("warning") == [
            f"theme file {folder / 'odd.toml'} skipped: unknown field '[/]'"
        ]
        assert _visible(app) == [f"#{session.id} [bold]x[/] [/]  running"]
        svg = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        assert "unknown theme '[/red]'; using textual-dark" in svg


# -- keys remapped from the settings -------------------------------------------------------


async def test_a_remapped_key_replaces_the_default(store: TraceStore, filled: Filled) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none", keys={"app.refresh": "f5"}))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await _settle(app, pilot)
        added = store.create_session("a third task")
        await pilot.press("r")  # no longer bound
        await _settle(app, pilot)
        assert len(_visible(app)) == 2
        await pilot.press("f5")
        await _settle(app, pilot)
        assert _visible(app)[0] == f"#{added.id} a third task  running"
        assert notes.all == []


async def test_an_unknown_binding_id_warns_and_the_rest_apply(
    store: TraceStore, filled: Filled
) -> None:
    notes = Notes()
    keys = {"app.refrsh": "f5", "app.quit": "x"}
    app = ConsoleApp(store=store, settings=Settings(backend="none", keys=keys))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await _settle(app, pilot)
        (warning,) = notes.of("warning")
        assert warning.startswith("unknown key binding id app.refrsh in the keys setting")
        assert "app.refresh" in warning
        await pilot.press("q")  # remapped away
        await pilot.pause()
        assert app.is_running
        await pilot.press("x")
        await pilot.pause()
    assert app.return_code == 0
