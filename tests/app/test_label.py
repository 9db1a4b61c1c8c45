"""The label screen, driven by Pilot against a real SQLite store: the queue, every key,
the counters, errors, the command palette, a large store, and `agent-console label`."""

from __future__ import annotations

import io
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from textual.app import App
from textual.widgets import Input, Static

from app import exit_codes
from app.screens.label import EMPTY, LabelScreen
from storage import LabelScope, LabelValue, TraceStore
from tests.support.label_trees import SessionBuilder, Tick
from tests.support.pilot import Notes, settle
from tests.support.traces import build_session
from training.label_pages import PAGE_SIZE, load_queue_page
from training.rules import count_training_data

pytestmark = [pytest.mark.cli]

SIZE = (110, 40)


class Host(App[None]):
    """The screen on its own, pushed over an empty default screen."""

    def __init__(self, store: TraceStore, session_id: int | None = None) -> None:
        super().__init__()
        self.store = store
        self.session_id = session_id

    def on_mount(self) -> None:
        self.push_screen(LabelScreen(self.store, self.session_id))


class OnlyScreen(App[None]):
    """The label screen as the app's only screen: there is nothing to go back to."""

    def __init__(self, store: TraceStore) -> None:
        super().__init__()
        self.store = store

    def get_default_screen(self) -> LabelScreen:
        return LabelScreen(self.store)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "traces.db"


@pytest.fixture
def store(db: Path) -> Iterator[TraceStore]:
    with TraceStore(db) as opened:
        yield opened


class Two:
    """Two sessions. The older, "Fix the failing test": tick 1 ran (its check passed),
    tick 2 the operator rewrote. The newer, "Break the cipher": tick 1 ran and its check
    failed, tick 2 the operator rejected an action before a second one ran."""

    def __init__(self, store: TraceStore) -> None:
        older = SessionBuilder(store, "Fix the failing test")
        self.a1: Tick = older.executed(1)
        self.a2: Tick = older.edited(2)
        newer = SessionBuilder(store, "Break the cipher")
        self.b1: Tick = newer.executed(1, callbacks={"key length": False})
        self.b2: Tick = newer.rejected(2, reason="it deletes the data")
        self.older, self.newer = older.id, newer.id
        #: the queue, newest first: session, then tick, then node id, descending
        self.order = [
            self.b2.action.id,
            self.b2.more["rejected_alternate"].id,
            self.b2.more["rejected"].id,
            self.b1.alternates[0].id,
            self.b1.action.id,
            self.a2.action.id,
            self.a2.alternates[0].id,
            self.a2.more["edited"].id,
            self.a1.alternates[0].id,
            self.a1.action.id,
        ]


@pytest.fixture
def two(store: TraceStore) -> Two:
    return Two(store)


def screen_of(app: App[None]) -> LabelScreen:
    assert isinstance(app.screen, LabelScreen)
    return app.screen


def text(app: App[None], selector: str) -> str:
    """A Static's content as plain text, drawn the way Rich would draw it."""
    console = Console(width=200, file=io.StringIO(), color_system=None)
    with console.capture() as captured:
        console.print(app.screen.query_one(selector, Static).content)
    return captured.get()


def queue_ids(app: App[None]) -> list[int]:
    return [item.node.id for item in screen_of(app).items]


def current_id(app: App[None]) -> int | None:
    item = screen_of(app).current
    return None if item is None else item.node.id


# -- the queue ----------------------------------------------------------------------------------


async def test_the_queue_is_newest_first_and_shows_what_to_judge_by(
    store: TraceStore, two: Two
) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert queue_ids(app) == two.order
        head = text(app, "#label-head")
        assert f"session #{two.newer} Break the cipher" in head
        assert f"tick 2  ·  action #{two.b2.action.id}  ·  executed  ·  score +1.00" in head
        assert "print(open('data').read())" in text(app, "#label-code")
        assert "decision: approve by the operator" in text(app, "#label-decision")
        assert "the data is printed" in text(app, "#label-expectation")
        assert "✔ check  True" in text(app, "#label-evaluations")
        assert "suggested: good — it ran and every evaluation of its tick passed (1)" in text(
            app, "#label-suggestion"
        )
        assert "labelled 0  ·  left 10" in text(app, "#label-counters")
        assert not app.screen.query_one("#label-message").display


async def test_a_rejected_branch_shows_the_reason_and_its_tick(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s", "s")
        assert current_id(app) == two.b2.more["rejected"].id
        assert "rejected" in text(app, "#label-head")
        assert "decision: reject by the operator — it deletes the data" in text(
            app, "#label-decision"
        )
        assert "data is gone" in text(app, "#label-expectation")
        assert "suggested: bad — the operator rejected it: it deletes the data" in text(
            app, "#label-suggestion"
        )


async def test_the_screen_can_be_limited_to_one_session(store: TraceStore, two: Two) -> None:
    app = Host(store, session_id=two.older)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert queue_ids(app) == two.order[5:]
        assert "left 5" in text(app, "#label-counters")


# -- the keys -------------------------------------------------------------------------------------


async def test_g_labels_the_branch_good_and_moves_on(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("g")
        await settle(pilot)
        label = store.label_of(two.b2.action.id)
        assert label is not None
        assert (label.value, label.scope, label.note) == (LabelValue.GOOD, LabelScope.BLOCK, None)
        assert current_id(app) == two.order[1]
        assert queue_ids(app) == two.order[1:]
        assert "labelled 1  ·  left 9" in text(app, "#label-counters")


async def test_b_labels_the_branch_bad(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("b")
        await settle(pilot)
        label = store.label_of(two.b2.action.id)
        assert label is not None and label.value is LabelValue.BAD
        assert label.scope is LabelScope.BLOCK
        assert store.session_labels(two.older) == {}


async def test_s_skips_without_a_label(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await settle(pilot)
        assert current_id(app) == two.order[1]
        assert store.session_labels(two.newer) == {} and store.session_labels(two.older) == {}
        assert "labelled 0  ·  left 9" in text(app, "#label-counters")
        # skipped branches stay in the store's queue
        assert [i.node.id for i in load_queue_page(store).items] == two.order


async def test_u_retracts_the_last_label_and_returns_to_its_branch(
    store: TraceStore, two: Two
) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert screen.check_action("undo", ()) is False  # nothing to undo yet
        await pilot.press("u")
        await settle(pilot)
        assert current_id(app) == two.order[0]

        await pilot.press("b", "s")
        await settle(pilot)
        assert current_id(app) == two.order[2]
        assert screen.check_action("undo", ()) is True
        await pilot.press("u")
        await settle(pilot)
        assert store.label_of(two.order[0]) is None
        [retracted] = store.label_history(two.order[0])
        assert retracted.value is LabelValue.BAD and retracted.retracted_at is not None
        assert current_id(app) == two.order[0]
        # the branch skipped after it comes again after it
        assert queue_ids(app)[:3] == two.order[:3]
        assert "labelled 0  ·  left 10" in text(app, "#label-counters")
        assert screen.check_action("undo", ()) is False


async def test_undo_goes_back_label_by_label(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("g")
        await settle(pilot)
        await pilot.press("b")
        await settle(pilot)
        await pilot.press("u")
        await settle(pilot)
        assert current_id(app) == two.order[1]
        assert store.label_of(two.order[0]) is not None
        await pilot.press("u")
        await settle(pilot)
        assert current_id(app) == two.order[0]
        assert store.label_of(two.order[0]) is None and store.label_of(two.order[1]) is None


async def test_n_writes_a_note_that_goes_with_the_next_label(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("n")
        note = app.screen.query_one("#label-note", Input)
        assert note.display and note.has_focus
        # letters that are keys elsewhere go into the note, not to the queue
        await pilot.press(*"big bug", "enter")
        await settle(pilot)
        assert store.label_of(two.order[0]) is None
        assert not note.display
        assert "note: big bug" in text(app, "#label-pending")
        await pilot.press("b")
        await settle(pilot)
        label = store.label_of(two.order[0])
        assert label is not None and label.note == "big bug" and label.value is LabelValue.BAD
        # the note went with that label only
        assert "note:" not in text(app, "#label-pending")
        await pilot.press("g")
        await settle(pilot)
        second = store.label_of(two.order[1])
        assert second is not None and second.note is None


async def test_escape_in_the_note_drops_the_edit(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("n", *"draft", "escape")
        assert isinstance(app.screen, LabelScreen)
        assert not app.screen.query_one("#label-note", Input).display
        assert "note:" not in text(app, "#label-pending")
        await pilot.press("g")
        await settle(pilot)
        label = store.label_of(two.order[0])
        assert label is not None and label.note is None


async def test_enter_confirms_the_suggestion(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s")
        # the rejected action's alternate: no evidence, no suggestion, enter does nothing
        assert current_id(app) == two.b2.more["rejected_alternate"].id
        assert screen_of(app).check_action("confirm", ()) is False
        await pilot.press("enter")
        await settle(pilot)
        assert store.label_of(two.b2.more["rejected_alternate"].id) is None
        await pilot.press("s", "enter")
        await settle(pilot)
        label = store.label_of(two.b2.more["rejected"].id)
        assert label is not None and label.value is LabelValue.BAD
        assert label.scope is LabelScope.BLOCK
        # the next one: its tick's only check failed
        assert current_id(app) == two.b1.alternates[0].id
        await pilot.press("s")
        assert "every evaluation of its tick failed (1)" in text(app, "#label-suggestion")


async def test_t_labels_the_whole_path_to_the_tick(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("t")
        assert f"the whole path to this tick (labels block #{two.b2.end.id})" in text(
            app, "#label-pending"
        )
        await pilot.press("g")
        await settle(pilot)
        label = store.label_of(two.b2.end.id)
        assert label is not None
        assert (label.value, label.scope) == (LabelValue.GOOD, LabelScope.PATH)
        assert store.label_of(two.b2.action.id) is None
        # the path covers the rejected action and tick 1's action before it, too
        covered = {two.b2.action.id, two.b2.more["rejected"].id, two.b1.action.id}
        assert queue_ids(app) == [i for i in two.order if i not in covered]
        assert "labelled 1  ·  left 7" in text(app, "#label-counters")
        # the scope goes back to the block for the next label
        assert "scope: this block" in text(app, "#label-pending")


async def test_t_twice_is_the_block_again(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("t", "t", "b")
        await settle(pilot)
        label = store.label_of(two.order[0])
        assert label is not None and label.scope is LabelScope.BLOCK


async def test_the_counters_follow_the_labels(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        before = count_training_data(store)
        assert before.sft_examples == 4 and before.dpo_pairs == 1
        counters = text(app, "#label-counters")
        assert "SFT examples 4  ·  DPO pairs 1" in counters

        await pilot.press("s")
        await pilot.press("g")  # the alternate of the rejected action: good
        await settle(pilot)
        after = count_training_data(store)
        assert after.sft_examples == 5 and after.dpo_pairs == 1
        assert "SFT examples 5  ·  DPO pairs 1" in text(app, "#label-counters")

        await pilot.press("b")  # the rejected action: bad, a sibling of the good one
        await settle(pilot)
        # a pair now; the action that ran after the operator's feedback stays an
        # example (a bad label on an action already rejected marks the mistake, not the
        # recovery after it)
        now = count_training_data(store)
        assert now.dpo_pairs == 2 and now.sft_examples == 5
        assert "labelled 2" in text(app, "#label-counters")
        assert "SFT examples 5  ·  DPO pairs 2" in text(app, "#label-counters")

        await pilot.press("u")
        await settle(pilot)
        assert "SFT examples 5  ·  DPO pairs 1" in text(app, "#label-counters")


async def test_an_empty_store_says_there_is_nothing_to_label(store: TraceStore) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert EMPTY in text(app, "#label-message")
        assert app.screen.query_one("#label-message").display
        assert not app.screen.query_one("#label-body").display
        for action in ("good", "bad", "skip", "confirm", "undo", "note", "toggle_scope"):
            assert not screen.check_action(action, ()), action
        await pilot.press("g", "b", "s", "enter")
        await settle(pilot)
        assert "labelled 0  ·  left 0  ·  SFT examples 0  ·  DPO pairs 0" in text(
            app, "#label-counters"
        )


async def test_labelling_the_last_branch_empties_the_queue(store: TraceStore) -> None:
    s = SessionBuilder(store, "one")
    s.unfinished(1)
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("s", "b")
        await settle(pilot)
        assert EMPTY + " (1 skipped" in text(app, "#label-message")


async def test_escape_goes_back(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("escape")
        assert not isinstance(app.screen, LabelScreen)
        assert app.return_code is None


async def test_escape_waits_for_a_label_being_saved(store: TraceStore, two: Two) -> None:
    notes = Notes()
    app = Host(store)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        screen.action_good()
        # leaving now would cancel the write before it ran
        assert screen.check_action("back", ()) is None
        screen.action_back()
        assert app.screen is screen
        await settle(pilot)
        assert store.label_of(two.order[0]) is not None
        assert screen.check_action("back", ()) is True
        await pilot.press("escape")
        assert not isinstance(app.screen, LabelScreen)
        assert [n.message for n in notes.all] == []


async def test_escape_with_nothing_to_go_back_to_exits(store: TraceStore, two: Two) -> None:
    app = OnlyScreen(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, LabelScreen)
        assert app.return_code is None
        await pilot.press("escape")
        await pilot.pause()
        assert app.return_code == 0


async def test_every_binding_has_an_id_and_a_tooltip() -> None:
    bindings = {b.id: b for b in LabelScreen.BINDINGS if not isinstance(b, tuple)}
    assert {k: getattr(bindings[k], "key", None) for k in bindings} == {
        "label.good": "g",
        "label.bad": "b",
        "label.confirm": "enter",
        "label.skip": "s",
        "label.undo": "u",
        "label.note": "n",
        "label.scope": "t",
        "label.back": "escape",
        "label.train": "T",
        "label.similar": "L",
    }
    assert all(getattr(b, "tooltip", "") for b in bindings.values())


async def test_the_keys_can_be_remapped(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        app.set_keymap({"label.good": "y"})
        await settle(pilot)
        await pilot.press("y")
        await settle(pilot)
        label = store.label_of(two.order[0])
        assert label is not None and label.value is LabelValue.GOOD


async def test_the_command_palette_offers_the_screens_verbs(store: TraceStore, two: Two) -> None:
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"label: bad")
        await pilot.pause(0.3)
        await pilot.press("enter")
        await settle(pilot)
        label = store.label_of(two.order[0])
        assert label is not None and label.value is LabelValue.BAD


# -- failures and scale ------------------------------------------------------------------------


async def test_a_store_failure_is_a_notification_and_the_branch_stays(
    store: TraceStore, two: Two, db: Path
) -> None:
    notes = Notes()
    app = Host(store)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(pilot)
        with sqlite3.connect(db) as conn:
            conn.execute("ALTER TABLE label RENAME TO label_moved")
        await pilot.press("g")
        await settle(pilot)
        errors = [n.message for n in notes.all if n.severity == "error"]
        assert len(errors) == 1
        assert errors[0].startswith("saving the label failed: ") and "label" in errors[0]
        assert "\n" not in errors[0]
        assert current_id(app) == two.order[0]
        screen = screen_of(app)
        assert not screen.busy and screen.check_action("good", ()) is True
        with sqlite3.connect(db) as conn:
            conn.execute("ALTER TABLE label_moved RENAME TO label")
        await pilot.press("g")
        await settle(pilot)
        assert store.label_of(two.order[0]) is not None


async def test_undo_of_a_label_taken_back_elsewhere_warns_and_goes_back(
    store: TraceStore, two: Two
) -> None:
    notes = Notes()
    app = Host(store)
    async with app.run_test(size=SIZE, message_hook=notes) as pilot:
        await settle(pilot)
        await pilot.press("g")
        await settle(pilot)
        label = store.label_of(two.order[0])
        assert label is not None
        store.retract_label(label.id)  # another console took it back meanwhile
        await pilot.press("u")
        await settle(pilot)
        warnings = [n.message for n in notes.all if n.severity == "warning"]
        assert warnings == [f"label {label.id} is already retracted: nothing more to undo for it"]
        assert current_id(app) == two.order[0]
        assert screen_of(app).check_action("undo", ()) is False
        assert "labelled 0" in text(app, "#label-counters")


async def test_a_large_queue_is_read_a_page_at_a_time(store: TraceStore) -> None:
    build_session(store, blocks=1200)
    total = store.count_label_queue()
    assert total > PAGE_SIZE + 50
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert len(screen.items) == PAGE_SIZE and screen.more
        assert f"left {total}" in text(app, "#label-counters")
        skips = PAGE_SIZE - 10
        for _ in range(skips - 1):  # the keys are the other tests' business; this is paging
            screen.action_skip()
        await pilot.press("s")
        await settle(pilot)
        # the next page came in behind the window: nothing skipped twice, nothing lost
        expected = [i.node.id for i in load_queue_page(store, limit=total).items]
        assert queue_ids(app) == expected[skips:]
        assert not screen.more
        assert f"left {total - skips}" in text(app, "#label-counters")


async def test_a_50000_block_store_opens_and_labels(store: TraceStore) -> None:
    session_id = build_session(store, blocks=50_000)
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        screen = screen_of(app)
        assert screen.current is not None and len(screen.items) <= PAGE_SIZE
        first = screen.current.node
        assert first.session_id == session_id
        assert first.tick == max(n.tick for n in store.label_queue(limit=1))
        await pilot.press("b")
        await settle(pilot)
        label = store.label_of(first.id)
        assert label is not None and label.value is LabelValue.BAD
        counts = count_training_data(store)
        assert f"SFT examples {counts.sft_examples:,}" in text(app, "#label-counters")


# -- the command ---------------------------------------------------------------------------------


async def test_the_console_opens_on_the_label_screen_as_the_command_asks(
    store: TraceStore, two: Two
) -> None:
    """What `agent-console label --session ID` runs; escape goes back to the console."""
    from agents.settings import Settings
    from app.console import ConsoleApp

    app = ConsoleApp(
        store=store, settings=Settings(backend="none"), start="label", label_session=two.older
    )
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert queue_ids(app) == two.order[5:]
        assert not app.screen.query_one("#label-note").display  # its stylesheet is loaded
        assert app.screen.query_one("#label-counters").styles.dock == "top"
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, LabelScreen)
        assert app.return_code is None


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": str(Path(sys.executable).parent),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "HOME": str(tmp_path),
    }
    return subprocess.run(
        [str(Path(sys.executable).with_name("agent-console")), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_label_with_an_unknown_session_is_one_line_and_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "fresh.db"
    result = run_cli(tmp_path, "--db", str(db), "label", "--session", "999")
    assert result.returncode == exit_codes.USAGE
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"agent-console: error: --session 999: no such session in {db}"
    ]


def test_label_refuses_the_flags_of_a_session(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "--db", str(tmp_path / "t.db"), "--query", "hi", "label")
    assert result.returncode == exit_codes.USAGE
    assert result.stderr.splitlines() == [
        "agent-console: error: --query does not go with `label` (it runs no session)"
    ]
    assert not (tmp_path / "t.db").exists()


def test_label_on_a_store_that_cannot_open_is_exit_5(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-store.db"
    bad.write_text("hello, not SQLite")
    result = run_cli(tmp_path, "--db", str(bad), "label")
    assert result.returncode == exit_codes.STORE
    assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr


# -- the snapshot ---------------------------------------------------------------------------------

SNAPSHOT_APP = Path(__file__).parent / "snapshot_apps" / "label_app.py"


def test_snapshot_of_the_label_screen(snap_compare) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(SNAPSHOT_APP, terminal_size=SIZE, run_before=settle)


# -- labels the task's checks gave (`agent-console improve`) --------------------------------


async def test_blocks_the_checks_labelled_stay_in_the_queue_marked_and_counted_apart(
    store: TraceStore,
) -> None:
    from storage import Actor
    from training.auto_labels import label_from_checks

    rollout = SessionBuilder(store, "A rollout")
    first, second = (
        rollout.executed(
            t, f"x = {t}", alternates=0, actor=Actor.POLICY, callbacks={"check": False}
        )
        for t in (1, 2)
    )
    store.update_node(second.end.id, meta={"task_passed": 0, "task_total": 1})
    assert label_from_checks(store, rollout.id).bad == 2
    app = Host(store)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert current_id(app) == second.action.id  # still the operator's to judge
        assert "⚙ checks said bad" in text(app, "#label-head")
        assert "suggested: bad — every evaluation of its tick failed" in text(
            app, "#label-suggestion"
        )
        assert "labelled 0  ·  ⚙ by the checks 2  ·  left" in text(app, "#label-counters")
        await pilot.press("g")  # the operator disagrees: their label wins
        await settle(pilot)
        label = store.label_of(second.action.id)
        assert label is not None and not label.automatic and label.value is LabelValue.GOOD
        assert second.action.id not in queue_ids(app)
        assert current_id(app) == first.action.id
        assert "labelled 1  ·  ⚙ by the checks 1  ·  left" in text(app, "#label-counters")
