"""Process exit codes, one per kind of failure a user can act on (listed in the README)."""

from __future__ import annotations

OK = 0
INTERNAL = 1  # a bug: the traceback went to the log file, not the terminal
USAGE = 2  # a bad flag, config file or setting
MODEL = 3  # no model can be loaded, served or reached
STORE = 4  # the trace store can't be opened or is from a newer version
INTERRUPTED = 130
