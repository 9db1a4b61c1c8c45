"""The message log: every notification of the session (app.message_log), newest last,
with its time, severity in a word, title and whole text, wrapped.

Opening it dismisses the toasts on screen (an error's toast otherwise stays until it is
clicked); a notification raised while it is open is added at the end. Wrapping text is
slow (about 2 s for 300,000 characters; a widget an entry costs too), so it opens on the newest page of entries and
`o` shows older pages.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.markup import MarkupError
from textual.screen import Screen
from textual.widgets import Footer, Static

from app.actions import MESSAGES_ACTIONS, bindings
from app.message_log import LoggedMessage, MessageLog

#: How often an open log looks for notifications raised since (seconds).
CATCH_UP_EVERY = 0.5
#: A page (what opening shows, and what `o` adds) holds at most this many entries...
PAGE_ENTRIES = 50
#: ... and this many characters of text (always at least one entry).
PAGE_CHARACTERS = 200_000
#: Each severity in a word (the colour is not the only sign).
SEVERITY_WORDS = {"information": "info", "warning": "warning", "error": "error"}
SEVERITY_STYLES = {"information": "dim", "warning": "bold $warning", "error": "bold $error"}
EMPTY = "No messages yet: every notification of this session will be listed here."


def entry_content(entry: LoggedMessage) -> Content:
    """The entry's heading line (time, severity, title) and its whole text below."""
    word = SEVERITY_WORDS.get(entry.severity, entry.severity)
    parts: list[str | tuple[str, str] | Content] = [
        (time.strftime("%H:%M:%S", time.localtime(entry.at)), "dim"),
        "  ",
        (word, SEVERITY_STYLES.get(entry.severity, "bold")),
    ]
    if entry.title:
        parts += ["  ", (entry.title, "bold")]
    body = Content(entry.message)
    if entry.markup:
        # cut in the middle of a tag, or never valid: the text as it is
        with contextlib.suppress(MarkupError):
            body = Content.from_markup(entry.message)
    parts += ["\n", body]
    if entry.cut:
        parts.append((f"\n… {entry.cut:,} more characters were not kept", "italic dim"))
    return Content.assemble(*parts)


def newest_page(entries: list[LoggedMessage]) -> list[LoggedMessage]:
    """The newest of `entries` that fit a page, oldest first."""
    page: list[LoggedMessage] = []
    characters = 0
    for entry in reversed(entries):
        characters += len(entry.message)
        if page and (len(page) == PAGE_ENTRIES or characters > PAGE_CHARACTERS):
            break
        page.append(entry)
    return page[::-1]


class MessagesScreen(Screen[None]):
    CSS_PATH = "messages.tcss"
    BINDINGS: ClassVar[list[BindingType]] = bindings(MESSAGES_ACTIONS)

    def __init__(self, message_log: MessageLog) -> None:
        super().__init__()
        self.message_log = message_log
        #: the entries shown, oldest first, each with its number in the log
        self.shown: list[tuple[int, Static]] = []
        #: the number of the newest entry shown (or skipped: none is newer than it)
        self.newest = 0

    def compose(self) -> ComposeResult:
        yield Static(id="messages-heading")
        with VerticalScroll(id="messages-list"):
            yield Static(id="messages-older")
            yield Static(EMPTY, id="messages-empty")
        yield Footer()

    def on_mount(self) -> None:
        self.app.clear_notifications()
        self.query_one("#messages-list").focus()
        page = newest_page(self.message_log.since(0))
        self.newest = page[-1].number if page else self.message_log.total
        self.show(page, at_start=False)
        self.call_after_refresh(self.action_last)
        self.set_interval(CATCH_UP_EVERY, self.catch_up)

    @property
    def oldest_shown(self) -> int:
        return self.shown[0][0] if self.shown else self.newest + 1

    def show(self, entries: Iterable[LoggedMessage], *, at_start: bool) -> None:
        widgets = [(e.number, Static(entry_content(e), classes=f"message {e.severity}"))
                   for e in entries]  # fmt: skip
        listing = self.query_one("#messages-list", VerticalScroll)
        if widgets:
            where = self.shown[0][1] if at_start and self.shown else None
            listing.mount_all([w for _, w in widgets], before=where)
            self.shown = [*widgets, *self.shown] if at_start else [*self.shown, *widgets]
        # the log dropped its oldest entries (it keeps a bounded number): so does the screen
        first = self.message_log.first
        gone = [w for number, w in self.shown if number < first]
        if gone:
            listing.remove_children(gone)
            self.shown = self.shown[len(gone) :]
        self.show_counts()

    def show_counts(self) -> None:
        log = self.message_log
        kept = len(log)
        heading = f"Messages: {kept:,} (newest last)"
        if log.total > kept:
            heading += f"; the {log.total - kept:,} oldest are no longer kept"
        self.query_one("#messages-heading", Static).update(heading)
        older = len(log.before(self.oldest_shown))
        notice = self.query_one("#messages-older", Static)
        notice.display = older > 0
        notice.update(f"{older:,} older messages not shown: o shows more")
        self.query_one("#messages-empty").display = kept == 0
        self.refresh_bindings()

    def catch_up(self) -> None:
        """Add the entries raised since the last look; follow them if the end was in view."""
        fresh = self.message_log.since(self.newest)
        if not fresh:
            return
        listing = self.query_one("#messages-list", VerticalScroll)
        following = listing.scroll_y >= listing.max_scroll_y
        self.newest = fresh[-1].number
        if len(fresh) > PAGE_ENTRIES:  # a flood: start again from the newest page
            listing.remove_children([widget for _, widget in self.shown])
            self.shown = []
            fresh = newest_page(fresh)
        self.show(fresh, at_start=False)
        if following:
            self.call_after_refresh(self.action_last)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "older":
            return bool(self.message_log.before(self.oldest_shown))
        return True

    def action_older(self) -> None:
        self.show(newest_page(self.message_log.before(self.oldest_shown)), at_start=True)
        self.call_after_refresh(self.action_first)

    def action_first(self) -> None:
        self.query_one("#messages-list", VerticalScroll).scroll_home(animate=False)

    def action_last(self) -> None:
        self.query_one("#messages-list", VerticalScroll).scroll_end(animate=False)

    def action_back(self) -> None:
        self.app.clear_notifications()
        self.dismiss(None)
