"""A command's one-line error printer (imports nothing of ours, so every command module,
`common` included, can use it)."""

from __future__ import annotations

import sys
from collections.abc import Callable

#: A command's error printer: one line, returns the exit code it is given.
Fail = Callable[[str, int], int]


def command_fail(command: str | None) -> Fail:
    """The error printer of `agent-console COMMAND` (None: of agent-console itself):
    `agent-console batch: error: ...` on stderr, one line."""
    prefix = f"agent-console {command}" if command else "agent-console"

    def fail(message: str, code: int) -> int:
        from agents.safe_text import escape_controls  # a leaf: no cycle to fear

        print(f"{prefix}: error: {escape_controls(message)}", file=sys.stderr)
        return code

    return fail
