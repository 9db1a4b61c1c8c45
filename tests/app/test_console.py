"""The console app, driven headless by Pilot against a real SQLite store: browsing the
sessions, themes, failures in the store workers, markup safety and remapped keys.

The main screen's panes (inspector, candidates, labelling keys, live updates, help, the
palette, the snapshot) are in tests/app/test_main_screen.py, which shares the helpers here.
"""

from __future__ import annotations

import contextlib
import html
import io
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets.tree import TreeNode
from textual.worker import WorkerCancelled, WorkerFailed

from agents.settings import Settings
from app import exit_codes
from app.console import FALLBACK_THEME, ConsoleApp
from app.screens.label import LabelScreen
from app.screens.main import MainScreen
from app.widgets.block_view import BlockView
from app.widgets.inspector import EMPTY as INSPECTOR_EMPTY
from app.widgets.inspector import Inspector
from app.widgets.trace_tree import BlockEntry, Entry, SessionEntry, TickEntry, TraceTree
from storage import NewNode, Node, NodeStatus, SessionStatus, TraceStore
from tests.support.pilot import Notes

SIZE = (120, 40)
#: the tree of an empty store: how to start a session
EMPTY_TREE = [
    "no sessions yet",
    "i  type a task for the agent",
    "ctrl+p  session: New … a shipped task",
]


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
                NewNode(
                    "action", "run_tests()", tick=1, parent_index=1, status=NodeStatus.EXECUTED
                ),
                NewNode(
                    "debug", "why did it fail?", tick=1, parent_index=3, status=NodeStatus.FAILED
                ),
            ],
        )
        self.observation, self.action, self.alternate, self.good, self.bad = nodes
        store.add_label(self.good.id, "good")
        store.add_label(self.bad.id, "bad", note="wrong guess")


@pytest.fixture
def filled(store: TraceStore) -> Filled:
    return Filled(store)


NO_MODEL = "no model: the backend setting is `none`. Browsing, labelling and training still work."


async def settle(app: ConsoleApp, pilot: Pilot[None]) -> None:
    """Let the store workers finish and their results reach the widgets. A worker that a
    newer one of its exclusive group cancelled, or whose failure the app reports itself,
    is done too: on a loaded machine the periodic reload can overtake the last one."""
    for _ in range(2):
        for worker in list(app.workers):
            with contextlib.suppress(WorkerCancelled, WorkerFailed):
                await worker.wait()
        await pilot.pause()


def tree(app: ConsoleApp) -> TraceTree:
    return app.query_one("#trace-tree", TraceTree)


def visible(app: ConsoleApp) -> list[str]:
    """The tree's visible lines, indented by depth, in display order."""
    lines: list[str] = []

    def walk(node: TreeNode[Entry], depth: int) -> None:
        for child in node.children:
            lines.append("  " * depth + str(child.label))
            if child.is_expanded:
                walk(child, depth + 1)

    walk(tree(app).root, 0)
    return lines


def plain(renderable: object) -> str:
    """A renderable as plain text, drawn the way Rich would draw it (no colours)."""
    console = Console(width=100, file=io.StringIO(), color_system=None)
    with console.capture() as captured:
        console.print(renderable)
    return captured.get()


def shown(app: ConsoleApp) -> str:
    """BlockView's content as plain text."""
    return plain(app.query_one(BlockView).content)


def inspected(app: ConsoleApp) -> str:
    """The Inspector's content as plain text, each line stripped of its padding."""
    lines = plain(app.query_one(Inspector).content).rstrip().splitlines()
    return "\n".join(line.rstrip() for line in lines)


def tree_node(app: ConsoleApp, node: Node) -> TreeNode[Entry]:
    def find(parent: TreeNode[Entry]) -> TreeNode[Entry] | None:
        for child in parent.children:
            data = child.data
            if isinstance(data, BlockEntry) and data.node.id == node.id:
                return child
            found = find(child)
            if found is not None:
                return found
        return None

    target = find(tree(app).root)
    assert target is not None, f"block {node.id} is not in the tree"
    return target


def tick_node(app: ConsoleApp, session_id: int, tick: int) -> TreeNode[Entry]:
    """A tick's line, under its session or (in a long session) its group of ticks."""
    wanted = TickEntry(session_id, tick)
    pending = list(tree(app).root.children)
    while pending:
        node = pending.pop()
        if node.data == wanted:
            return node
        if not isinstance(node.data, TickEntry | BlockEntry):
            pending.extend(node.children)
    raise AssertionError(f"no tick {tick} of session {session_id} in the tree")


async def move_to(app: ConsoleApp, pilot: Pilot[None], line: int) -> None:
    """Move the tree's cursor to a visible line with the arrow keys, as the operator does."""
    now = tree(app).cursor_line
    await pilot.press(*(["down"] * (line - now) if line >= now else ["up"] * (now - line)))
    await settle(app, pilot)
    assert tree(app).cursor_line == line


async def select(app: ConsoleApp, pilot: Pilot[None], node: Node) -> None:
    """Select a visible block with the arrow keys."""
    await move_to(app, pilot, tree_node(app, node).line)
    cursor = tree(app).cursor_node
    assert cursor is not None and isinstance(cursor.data, BlockEntry)
    assert cursor.data.node.id == node.id


async def expand_first_session(app: ConsoleApp, pilot: Pilot[None]) -> None:
    """Open the session on the top line (the cursor starts there) with space."""
    await settle(app, pilot)
    assert tree(app).cursor_line == 0
    await pilot.press("space")
    await settle(app, pilot)


# -- browsing -----------------------------------------------------------------------------


async def test_sessions_are_listed_newest_updated_first(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
        assert visible(app) == [
            f"#{filled.first.id} fix the failing test  running",
            f"#{filled.second.id} Second session  running",
        ]
        trace_tree = tree(app)
        assert trace_tree.has_focus
        assert trace_tree.cursor_line == 0
        cursor = trace_tree.cursor_node
        assert cursor is not None and isinstance(cursor.data, SessionEntry)
        assert cursor.data.session.id == filled.first.id
        assert app.sub_title == store.where
        # the highlighted session is summarised where a block would show
        assert shown(app).splitlines() == [
            f"session #{filled.first.id} · running",
            "x",
            "",
            "fix the failing test",
            "in detail",
        ]
        # lazy: nothing below a session is read before it is expanded
        assert trace_tree.traces == {}
        assert all(not node.children for node in trace_tree.root.children)


async def test_a_database_opened_after_the_first_frame_is_read_and_closed_at_the_end(
    db: Path, store: TraceStore, filled: Filled
) -> None:
    """The command line in a terminal gives the console a database, not a store: the first
    frame is drawn with the tree loading and only quitting offered; then the store opens
    in a worker, the sessions are read, and the store is closed when the console ends."""
    store.close()
    app = ConsoleApp(database=str(db), settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        bench = app.workbench
        if not bench.store_ready.is_set():  # the open is quick: seen when it is not done
            assert tree(app).loading and app.sub_title == "opening the store…"
            assert app.check_action("refresh", ()) is False
            assert app.main.check_action("label", ()) is False
        await pilot.pause()
        await settle(app, pilot)
        assert bench.store_ready.is_set() and not tree(app).loading
        assert visible(app) == [
            f"#{filled.first.id} fix the failing test  running",
            f"#{filled.second.id} Second session  running",
        ]
        assert app.sub_title == app.store.where and str(db) in app.sub_title
        assert app.check_action("refresh", ()) is True
        assert db.with_name(db.name + "-wal").exists()
    # closed: the last connection gone, SQLite folds the write-ahead log back and removes it
    assert not db.with_name(db.name + "-wal").exists()


async def test_a_session_left_running_by_a_dead_process_is_marked_aborted_on_start(
    db: Path, store: TraceStore
) -> None:
    """Before, a session whose console was killed (or could not quit) stayed `waiting` in
    the tree forever; one whose process still runs is left alone."""
    from agents.processes import OWNER, this_process
    from tests.support.processes import dead_owner

    owner = dead_owner()
    ghost = store.create_session(
        "ghost", title="Ghost", settings={OWNER: owner}, status=SessionStatus.WAITING
    ).id
    alive = store.create_session(
        "alive", title="Alive", settings={OWNER: this_process()}, status=SessionStatus.RUNNING
    ).id
    store.close()
    notes = Notes()
    app = ConsoleApp(database=str(db), settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await pilot.pause()
        await settle(app, pilot)
        await settle(app, pilot)
        lines = visible(app)  # the ghost, updated last, comes first
        assert lines[0].startswith(f"#{ghost} Ghost  aborted: its process"), lines
        assert lines[1] == f"#{alive} Alive  running", lines
        said = f"session {ghost}: left running by a process that is gone; marked aborted"
        assert sorted(notes.of("warning")) == sorted([NO_MODEL, f"{said} (resumable)"])
        assert app.store.get_session(alive).status is SessionStatus.RUNNING


async def test_a_database_that_cannot_be_opened_ends_the_console_with_exit_code_5(
    tmp_path: Path,
) -> None:
    noise = tmp_path / "noise.db"
    noise.write_bytes(b"\x01" * 8192)
    app = ConsoleApp(database=str(noise), settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(200):
            if app.store_problem is not None:
                break
            await pilot.pause(0.02)
    assert app.return_code == exit_codes.STORE
    assert app.store_problem is not None and "not a SQLite database" in app.store_problem
    assert noise.read_bytes() == b"\x01" * 8192


async def test_expanding_a_session_loads_its_ticks_and_the_last_ticks_blocks(
    store: TraceStore, filled: Filled
) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        assert visible(app) == [
            f"#{filled.first.id} fix the failing test  running",
            "  tick 0 ✔  3 blocks",
            "  tick 1 ·  +1 -1  2 blocks",
            "    + action  run_tests()",
            "    - ! debug  why did it fail?",
            f"#{filled.second.id} Second session  running",
        ]
        trace = tree(app).traces[filled.first.id]
        # the last tick is opened; the earlier one makes its block lines on expansion
        assert trace.filled == {1}
        assert not tick_node(app, filled.first.id, 0).children

        await move_to(app, pilot, 1)
        await pilot.press("space")
        await settle(app, pilot)
        assert trace.filled == {0, 1}
        assert visible(app)[1:5] == [
            "  tick 0 ✔  3 blocks",
            "    observation  the repo has 3 files",
            "    ✔ action +0.8  print('hello')",  # the alternate is folded under it
            "  tick 1 ·  +1 -1  2 blocks",
        ]
        await move_to(app, pilot, 3)
        await pilot.press("space")
        await settle(app, pilot)
        assert visible(app)[3:5] == [
            "    ✔ action +0.8  print('hello')",
            "      ⋯ action  print('other')",
        ]

        # collapsing and expanding the session again neither reads nor adds blocks twice
        lines = visible(app)
        await move_to(app, pilot, 0)
        await pilot.press("space")
        await settle(app, pilot)
        assert visible(app) == [lines[0], lines[-1]]
        await pilot.press("space")
        await settle(app, pilot)
        assert visible(app) == lines
        assert tree(app).traces[filled.first.id] is trace


async def test_a_session_without_blocks_says_so(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        await pilot.press("down", "space")
        await settle(app, pilot)
        assert visible(app) == [
            f"#{filled.first.id} fix the failing test  running",
            f"#{filled.second.id} Second session  running",
            "  no blocks yet",
        ]
        assert tree(app).traces[filled.second.id].nodes == {}
        assert shown(app).splitlines()[0] == f"session #{filled.second.id} · running"


async def test_the_selected_action_block_is_shown(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await move_to(app, pilot, 1)
        await pilot.press("space")
        await settle(app, pilot)
        await select(app, pilot, filled.action)
        assert tree(app).cursor_line == 3
        head, score, blank, *body = shown(app).splitlines()
        assert head == f"#{filled.action.id} action · tick 0 · approved · by model"
        assert score == "score +0.75   tests +0.50   style +0.25"
        assert blank == ""
        assert [b.rstrip() for b in body] == ["print('hello')", "x = 1"]
        # the tick's inspector follows the selection
        assert inspected(app).splitlines()[:3] == ["tick 0", "expectation", "none written"]


async def test_labels_show_in_the_block_view_too(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await select(app, pilot, filled.bad)
        assert shown(app).splitlines()[0] == (
            f"#{filled.bad.id} debug · tick 1 · failed · by model · labelled bad: wrong guess"
        )
        await pilot.press("up")
        await settle(app, pilot)
        assert shown(app).splitlines()[0] == (
            f"#{filled.good.id} action · tick 1 · executed · by model · labelled good"
        )
        await pilot.press("up")  # the "tick 1" line: no block selected
        await settle(app, pilot)
        assert shown(app).strip() == "tick 1: select one of its blocks"


async def test_the_screen_shows_the_tree_and_the_block(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        await move_to(app, pilot, 1)
        await pilot.press("space")
        await settle(app, pilot)
        await select(app, pilot, filled.action)
        svg = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        for expected in ("Second", "tick 0", "observation", "score +0.75", "approved", "no model"):
            assert expected in svg


async def test_an_empty_store(store: TraceStore) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert visible(app) == EMPTY_TREE
        await pilot.press("space", "down", "enter")
        await settle(app, pilot)
        assert visible(app) == EMPTY_TREE
        assert "Select a block" in shown(app)
        assert inspected(app) == INSPECTOR_EMPTY


async def test_r_reloads_the_sessions(store: TraceStore, filled: Filled) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert len(visible(app)) == 2
        added = store.create_session("a third task")
        assert len(visible(app)) == 2  # not before asked
        await pilot.press("r")
        await settle(app, pilot)
        assert visible(app)[0] == f"#{added.id} a third task  running"
        assert len(visible(app)) == 3


async def test_r_on_an_empty_store_then_filled(store: TraceStore) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        assert visible(app) == EMPTY_TREE
        store.create_session("now there is one", title="One")
        await pilot.press("r")
        await settle(app, pilot)
        assert [line.split("  ")[0] for line in visible(app)] == ["#1 One"]


async def test_a_session_line_says_why_it_ended_and_with_which_adapter(
    store: TraceStore,
) -> None:
    failed = store.create_session("task", title="Broken", adapter="fix-ngrams")
    store.set_session_status(
        failed.id, SessionStatus.FAILED, reason="the model server at 127.0.0.1:8000 " + "x" * 80
    )
    done = store.create_session("task", title="Done")
    store.set_session_status(done.id, SessionStatus.COMPLETED, reason="the task's checks passed")
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        lines = visible(app)
        assert lines[0] == "#2 Done  completed"  # a success needs no reason
        assert lines[1].startswith("#1 Broken  failed: the model server at 127.0.0.1:8000 x")
        assert lines[1].endswith("…  adapter fix-ngrams"), lines[1]


async def test_r_forgets_opened_sessions_and_reads_them_again(
    store: TraceStore, filled: Filled
) -> None:
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE) as pilot:
        await expand_first_session(app, pilot)
        assert filled.first.id in tree(app).traces
        store.add_nodes(filled.first.id, [NewNode("outcome", "done", tick=2)])
        await pilot.press("r")
        await settle(app, pilot)
        assert tree(app).traces == {}
        await pilot.press("space")
        await settle(app, pilot)
        assert visible(app)[1:5] == [
            "  tick 0 ✔  3 blocks",
            "  tick 1 ·  +1 -1  2 blocks",
            "  tick 2  1 blocks",
            "    outcome  done",
        ]


# -- themes -------------------------------------------------------------------------------


async def test_the_default_theme_is_applied(store: TraceStore) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        assert app.theme == "agent-console"
        assert app.current_theme.primary.upper() == "#4EA1D3"
        assert str(app.current_theme.background).upper() == "#14171C"
        assert notes.of("error") == []
        assert notes.of("warning") == [NO_MODEL]  # the only one: the theme loaded quietly
        # the tree's error marks use the theme's error colour
        assert tree(app).error_colour == app.current_theme.error


async def test_an_unknown_theme_falls_back_with_an_error(store: TraceStore) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none", theme="no-such-theme"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        assert app.theme == FALLBACK_THEME == "textual-dark"
        assert notes.of("error") == ["unknown theme 'no-such-theme'; using textual-dark"]
        assert visible(app) == EMPTY_TREE


async def test_a_builtin_textual_theme_by_name(store: TraceStore) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none", theme="nord"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        assert app.theme == "nord"
        assert notes.of("error") == []
        assert notes.of("warning") == [NO_MODEL]


async def test_a_theme_file_in_the_config_folder_can_be_chosen(
    store: TraceStore, tmp_path: Path
) -> None:
    folder = tmp_path / "config" / "agent-console" / "themes"
    folder.mkdir(parents=True)
    (folder / "mine.toml").write_text('name = "mine"\nprimary = "#123456"\n', encoding="utf-8")
    app = ConsoleApp(store=store, settings=Settings(backend="none", theme="mine"))
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
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
        await settle(app, pilot)
        warnings = [w for w in notes.of("warning") if w != NO_MODEL]
        assert len(warnings) == 2
        assert any(str(folder / "bad-toml.toml") in w for w in warnings)
        assert f"theme file {folder / 'bad-colour.toml'} skipped: primary = 12 is not a colour" in (
            warnings
        )
        assert notes.of("error") == []
        assert app.theme == "agent-console"
        assert len(visible(app)) == 2


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
        await settle(app, pilot)
        before = visible(app)
        _drop(db, "session")
        await pilot.press("r")
        await settle(app, pilot)
        errors = notes.of("error")
        assert len(errors) == 1
        assert errors[0].startswith("load_sessions failed: ")
        assert "no such table: session" in errors[0]
        assert "\n" not in errors[0] and "SELECT" not in errors[0]  # the cause, not the SQL
        assert app.is_running
        assert visible(app) == before  # the old list stays
        await pilot.press("down")
        await pilot.pause()
        assert tree(app).cursor_line == 1  # still responds to keys


async def test_a_failed_trace_load_is_reported_and_the_app_keeps_running(
    store: TraceStore, filled: Filled, db: Path
) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        _drop(db, "label")
        await pilot.press("space")
        await settle(app, pilot)
        errors = notes.of("error")
        assert len(errors) == 1
        assert errors[0].startswith("load_trace failed: ")
        assert "no such table: label" in errors[0]
        assert "\n" not in errors[0] and "SELECT" not in errors[0]
        assert app.is_running
        assert filled.first.id not in tree(app).traces
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_a_failed_inspector_load_is_reported_and_the_app_keeps_running(
    store: TraceStore, filled: Filled, db: Path
) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none"))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await expand_first_session(app, pilot)
        await move_to(app, pilot, 2)  # the "tick 1" line
        assert inspected(app).splitlines()[0] == "tick 1"
        _drop(db, "evaluation")
        await pilot.press("up")  # "tick 0": its evaluations are read, and that fails
        await settle(app, pilot)
        errors = notes.of("error")
        assert len(errors) == 1
        assert errors[0].startswith("load_inspector failed: ")
        assert "no such table: evaluation" in errors[0]
        assert "\n" not in errors[0] and "SELECT" not in errors[0]
        assert app.is_running
        assert shown(app).strip() == "tick 0: select one of its blocks"
        await pilot.press("down", "down")
        await settle(app, pilot)
        assert shown(app).startswith(f"#{filled.good.id} action · tick 1")


# -- text from users and errors is shown as text, never parsed as markup ------------------


async def test_bracketed_text_in_notifications_and_titles_is_shown_literally(
    store: TraceStore, tmp_path: Path
) -> None:
    folder = tmp_path / "config" / "agent-console" / "themes"
    folder.mkdir(parents=True)
    (folder / "odd.toml").write_text('name = "odd"\nprimary = "red"\n"[/]" = 1\n', "utf-8")
    session = store.create_session("task [/]", title="[bold]x[/] [/]")
    (block,) = store.add_nodes(session.id, [NewNode("observation", "[red]not red[/] [/]")])
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none", theme="[/red]"))
    # notifications=True: the toasts are really rendered, as they are outside tests
    async with app.run_test(size=SIZE, notifications=True, message_hook=notes) as pilot:
        await settle(app, pilot)
        await pilot.pause(0.2)
        assert app.is_running
        assert app.theme == FALLBACK_THEME
        assert notes.of("error") == ["unknown theme '[/red]'; using textual-dark"]
        assert notes.of("warning") == [
            f"theme file {folder / 'odd.toml'} skipped: unknown field '[/]'",
            NO_MODEL,
        ]
        assert visible(app) == [f"#{session.id} [bold]x[/] [/]  running"]
        svg = html.unescape(app.export_screenshot()).replace("\xa0", " ")
        assert "unknown theme '[/red]'; using textual-dark" in svg
        assert shown(app).splitlines()[-1] == "task [/]"

        await pilot.press("space")
        await settle(app, pilot)
        await select(app, pilot, block)
        assert visible(app)[-1] == "    observation  [red]not red[/] [/]"
        assert shown(app).splitlines()[-1] == "[red]not red[/] [/]"
        assert "observation: [red]not red[/] [/]" in inspected(app)


# -- keys remapped from the settings -------------------------------------------------------


async def test_a_remapped_key_replaces_the_default(store: TraceStore, filled: Filled) -> None:
    notes = Notes()
    app = ConsoleApp(store=store, settings=Settings(backend="none", keys={"app.refresh": "f5"}))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        added = store.create_session("a third task")
        await pilot.press("r")  # no longer bound
        await settle(app, pilot)
        assert len(visible(app)) == 2
        await pilot.press("f5")
        await settle(app, pilot)
        assert visible(app)[0] == f"#{added.id} a third task  running"
        assert notes.of("warning") == [NO_MODEL]


async def test_an_unknown_binding_id_warns_and_the_rest_apply(
    store: TraceStore, filled: Filled
) -> None:
    notes = Notes()
    keys = {"app.refrsh": "f5", "app.quit": "x"}
    app = ConsoleApp(store=store, settings=Settings(backend="none", keys=keys))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        (warning,) = [w for w in notes.of("warning") if w != NO_MODEL]
        assert warning.startswith("unknown key binding id app.refrsh in the keys setting")
        assert "app.refresh" in warning
        await pilot.press("q")  # remapped away
        await pilot.pause()
        assert app.is_running
        await pilot.press("x")
        await pilot.pause()
    assert app.return_code == 0


async def test_a_main_screen_key_can_be_remapped(store: TraceStore, filled: Filled) -> None:
    notes = Notes()
    keys = {"main.label": "L", "main.lable": "K"}
    app = ConsoleApp(store=store, settings=Settings(backend="none", keys=keys))
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(app, pilot)
        (warning,) = [w for w in notes.of("warning") if w != NO_MODEL]
        assert warning.startswith("unknown key binding id main.lable in the keys setting")
        assert "main.label" in warning and "tree.end" in warning
        await pilot.press("l")  # remapped away
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
        await pilot.press("L")
        await settle(app, pilot)
        assert isinstance(app.screen, LabelScreen)
        await pilot.press("escape")
        await settle(app, pilot)
        assert isinstance(app.screen, MainScreen)
