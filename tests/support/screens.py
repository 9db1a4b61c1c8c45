"""Reading a captured terminal screen of the console."""

from __future__ import annotations

import re

#: The agent's own code may raise in the sandbox: its `error` block (a tree line, or the
#: block view's pane, both drawn with the console's borders) holds a traceback by design.
#: Any other line with one is the console's own (a crash printed to the terminal).
AGENTS_OWN = re.compile(r"── (?:▶ )?(?:! )?error |▎")


def console_traceback(screen: str) -> bool:
    """Whether the screen shows a traceback that is not inside one of the agent's blocks."""
    return any("Traceback" in line and not AGENTS_OWN.search(line) for line in screen.splitlines())
