"""Process exit codes, one per kind of outcome a user can act on (listed in docs/reference.md)."""

from __future__ import annotations

OK = 0  # done; for --query: the session completed
INTERNAL = 1  # a bug: the traceback went to the log file, not the terminal
FAILED = 1  # --query: the session failed (or the sandbox is unavailable)
USAGE = 2  # a bad flag, config file, setting or task file
MODEL = 3  # no model can be loaded, served or reached
TRUNCATED = 4  # --query: the session hit its tick or token limit
STORE = 5  # the trace store can't be opened or is from a newer version
INTERRUPTED = 130
CLOSED_PIPE = 141  # the reader of its output went away (`| head`): as if killed by SIGPIPE
