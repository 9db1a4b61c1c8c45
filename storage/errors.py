"""Errors a user can cause by pointing the store at the wrong thing.

Each carries one line fit to show as-is in the CLI or a TUI notification.
"""

from __future__ import annotations


class StoreError(Exception):
    """The trace store can't be opened or used; `str()` is the message for the user."""


class NotATraceStoreError(StoreError):
    """The file exists but is not a SQLite database, or is someone else's database."""


class SchemaTooNewError(StoreError):
    """Written by a newer agent-console; we refuse to touch it."""


class NotFoundError(StoreError, KeyError):
    """No row with that id or name."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "not found"
