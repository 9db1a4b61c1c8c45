"""The owner record (`agents.processes`) of a real process that ran and has ended."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from agents.processes import gone, this_process


def started(pid: int) -> int:
    """When `pid` started, as /proc says (ticks after boot)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def dead_owner() -> dict[str, Any]:
    """A process of this host that ran (and was seen running) and ended, waited for."""
    child = subprocess.Popen(["sleep", "30"])
    owner = {**this_process(), "pid": child.pid, "started": started(child.pid)}
    assert not gone(owner)
    child.kill()
    child.wait()
    return owner
