"""The message log (`m`): every notification kept in full, errors that stay on screen
until read, training jobs that say when they end, the log's bounds and its snapshots.

Driven by Pilot over the real console and a real SQLite store (no model: backend `none`).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widget import Widget
from textual.widgets import Static

from agents.settings import Settings
from app.console import ERROR_TIMEOUT, ConsoleApp
from app.message_log import LONGEST, MessageLog
from app.screens.jobs import JobsScreen
from app.screens.main import MainScreen
from app.screens.messages import PAGE_ENTRIES, MessagesScreen
from storage import JobKind, JobStatus, TraceStore
from tests.app.snapshot_apps.messages_app import notify_and_open
from tests.support.pilot import Notes, until

SMALL = (80, 24)
SNAPSHOT_APP = Path(__file__).parent / "snapshot_apps" / "messages_app.py"
#: longer than a toast shows, over several lines
LONG_TEXT = "\n".join(
    f"line {n}: the sandbox said something long enough to wrap at eighty columns, twice over"
    for n in range(4)
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TraceStore]:
    with TraceStore(tmp_path / "traces.db") as opened:
        yield opened


def console(store: TraceStore) -> ConsoleApp:
    return ConsoleApp(store=store, settings=Settings(backend="none"))


def toasts(app: ConsoleApp) -> list[str]:
    """The text of every toast on the current screen."""
    texts = []
    for toast in app.screen.query("Toast"):
        rendered = toast.render()
        texts.append(getattr(rendered, "plain", str(rendered)))
    return texts


def shown(app: ConsoleApp) -> list[Static]:
    assert isinstance(app.screen, MessagesScreen)
    return list(app.screen.query(".message").results(Static))


def shown_text(widget: Widget) -> str:
    assert isinstance(widget, Static)
    content = widget.content
    return getattr(content, "plain", str(content))


async def test_every_severity_is_kept_in_full_and_shown_wrapped(store: TraceStore) -> None:
    assert len(LONG_TEXT) > 300
    app = console(store)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        app.notify(LONG_TEXT, title="all of it", markup=False)
        app.screen.notify("warning: " + LONG_TEXT, severity="warning", markup=False)
        app.main.query_one("#status-bar").notify("error: " + LONG_TEXT, severity="error")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen), "the log")
        await pilot.pause()
        entries = shown(app)
        # the console's own start-up warning first, then these three, newest last
        assert "no model" in shown_text(entries[0])
        texts = [shown_text(e) for e in entries[1:]]
        assert len(texts) == 3
        for text, word, body in zip(
            texts,
            ("info", "warning", "error"),
            (LONG_TEXT, "warning: " + LONG_TEXT, "error: " + LONG_TEXT),
            strict=True,
        ):
            heading, _, rest = text.partition("\n")
            assert heading.split()[1] == word
            assert rest == body  # whole, not cut
        assert texts[0].splitlines()[0].endswith("all of it")
        # wrapped, not cut: each line of the text is wider than the pane, so takes two rows
        last = entries[-1]
        lines = LONG_TEXT.splitlines()
        assert all(len(line) > last.size.width for line in lines)
        assert last.size.height >= 1 + 2 * len(lines)
        heading = app.screen.query_one("#messages-heading", Static)
        assert "Messages: 4" in shown_text(heading)


async def test_an_error_toast_stays_until_the_log_is_opened(store: TraceStore) -> None:
    notes = Notes()
    app = console(store)
    async with app.run_test(size=SMALL, message_hook=notes, notifications=True) as pilot:
        await pilot.pause()
        app.notify("a passing note", timeout=0.3, markup=False)
        app.notify("the job failed", severity="error", timeout=0.3, markup=False)
        await pilot.pause()
        timeouts = {n.message: n.timeout for n in notes.seen}
        assert timeouts["a passing note"] == 0.3
        assert timeouts["the job failed"] == ERROR_TIMEOUT
        await pilot.pause(1.0)
        on_screen = "\n".join(toasts(app))
        assert "the job failed" in on_screen
        assert "a passing note" not in on_screen
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen), "the log")
        await pilot.pause()
        assert toasts(app) == []
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, MainScreen), "the main screen")
        await pilot.pause()
        assert toasts(app) == []


async def test_m_opens_the_log_on_the_main_and_jobs_screens_and_escape_closes_it(
    store: TraceStore,
) -> None:
    app = console(store)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen), "the log")
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, MainScreen), "the main screen")
        await pilot.press("j")
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "the jobs screen")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen), "the log")
        await pilot.press("m")  # m again closes it
        await until(pilot, lambda: isinstance(app.screen, JobsScreen), "back to the jobs")


def test_the_log_keeps_the_newest_entries_and_cuts_a_long_message() -> None:
    log = MessageLog(limit=3, longest=10)
    for n in range(5):
        log.add(f"note {n}")
    assert [e.message for e in log] == ["note 2", "note 3", "note 4"]
    assert (log.total, log.first, len(log)) == (5, 3, 3)
    entry = log.add("x" * 2_000, title="t" * 50)
    assert (entry.message, entry.cut, entry.title) == ("x" * 10, 1_990, "t" * 10)
    assert [e.number for e in log] == [4, 5, 6]


async def test_a_huge_notification_is_kept_cut_with_a_note(store: TraceStore) -> None:
    huge = "y" * (LONGEST + 5_000)
    app = console(store)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        app.notify(huge, severity="error", markup=False)
        *_, entry = app.message_log
        assert (len(entry.message), entry.cut) == (LONGEST, 5_000)
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen), "the log")
        await pilot.pause()
        assert shown_text(shown(app)[-1]).endswith("… 5,000 more characters were not kept")


async def test_the_log_opens_on_the_newest_page_and_o_shows_older_ones(
    store: TraceStore,
) -> None:
    app = console(store)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        for n in range(PAGE_ENTRIES + 20):  # and the start-up warning: 21 older
            app.notify(f"note {n}", markup=False)
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen), "the log")
        await pilot.pause()
        entries = shown(app)
        assert len(entries) == PAGE_ENTRIES
        assert shown_text(entries[-1]).endswith(f"note {PAGE_ENTRIES + 19}")
        older = app.screen.query_one("#messages-older", Static)
        assert "21 older messages" in shown_text(older)
        await pilot.press("o")
        await pilot.pause()
        entries = shown(app)
        assert len(entries) == PAGE_ENTRIES + 21
        assert "no model" in shown_text(entries[0])
        assert shown_text(entries[1]).endswith("note 0")
        assert not older.display


async def test_a_notification_raised_while_the_log_is_open_is_added(store: TraceStore) -> None:
    app = console(store)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen), "the log")
        app.notify("arrived later", markup=False)
        await until(
            pilot, lambda: shown_text(shown(app)[-1]).endswith("arrived later"), "the new entry"
        )
        # a flood between two looks: the newest page, and the rest behind `o`
        for n in range(PAGE_ENTRIES + 5):
            app.notify(f"flood {n}", markup=False)
        last = f"flood {PAGE_ENTRIES + 4}"
        await until(pilot, lambda: shown_text(shown(app)[-1]).endswith(last), "the flood")
        await pilot.pause()
        assert len(shown(app)) == PAGE_ENTRIES
        older = app.screen.query_one("#messages-older", Static)
        assert shown_text(older).startswith("7 older messages")  # start-up, later, 5 floods


async def test_a_job_that_ends_says_so_once_whatever_screen_is_open(store: TraceStore) -> None:
    history = store.create_job(JobKind.SFT, "long-done")
    store.update_job(history.id, status=JobStatus.COMPLETED)
    failing = store.create_job(JobKind.SFT, "sft-b")
    app = console(store)
    async with app.run_test(size=SMALL) as pilot:
        await until(pilot, lambda: failing.id in app.main.jobs.job_watch.active, "the job watched")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MessagesScreen), "the log")
        store.update_job(failing.id, status=JobStatus.RUNNING)
        store.update_job(failing.id, status=JobStatus.FAILED, error="CUDA out of memory\nat step 3")
        told = f"job {failing.id} (sft-b): failed: CUDA out of memory\nat step 3"
        await until(pilot, lambda: any(e.message == told for e in app.message_log), "the end")
        done = store.create_job(JobKind.DPO, "dpo-c")  # queued and done between two looks
        store.update_job(done.id, status=JobStatus.COMPLETED)
        told_done = f"job {done.id} (dpo-c): completed"
        await until(pilot, lambda: any(e.message == told_done for e in app.message_log), "done")
        await pilot.pause(2.5)  # two more looks: nothing is told twice
        jobs = [e for e in app.message_log if e.message.startswith("job ")]
        assert [(e.message, e.severity) for e in jobs] == [
            (told, "error"),
            (told_done, "information"),
        ]
        # the open log shows them too
        await until(pilot, lambda: shown_text(shown(app)[-1]).endswith(told_done), "shown")


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_snapshot_of_the_message_log(snap_compare, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    assert snap_compare(SNAPSHOT_APP, terminal_size=size, run_before=notify_and_open)
