"""Which process runs a session: its host, pid and start time, kept in the session's
settings (`owner`) while it runs. A console that starts, or `agent-console sessions`, marks
aborted the sessions still stored running or waiting whose process on this host is gone
(killed, crashed, or a console that could not quit), so no live-looking ghost stays in
the tree; a session of another host, or of a process that still runs, is left alone."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from storage import SessionStatus

if TYPE_CHECKING:
    from storage import TraceStore

#: the session setting naming the process that runs it
OWNER = "owner"
#: the statuses of a session some process is running
LIVE = (SessionStatus.RUNNING, SessionStatus.WAITING)


def this_process() -> dict[str, Any]:
    """The owner record of the calling process."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "started": _started(pid)}


def _started(pid: int) -> int | None:
    """When `pid` started (clock ticks after boot, /proc's field 22); None when there is no
    such process, or only its zombie is left."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def gone(owner: Mapping[str, Any]) -> bool:
    """Whether `owner` was a process of this host that no longer runs (its pid now taken
    by another process counts as gone). Another host's, or an unreadable record: False."""
    pid, started = owner.get("pid"), owner.get("started")
    if owner.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    if not Path("/proc/self/stat").exists():  # no /proc: whether the pid exists is all
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False
    now = _started(pid)
    return now is None or (isinstance(started, int) and now != started)


def reap_orphan_sessions(store: TraceStore, limit: int = 1_000) -> list[int]:
    """Mark aborted every session stored running or waiting whose process on this host
    is gone, the reason saying so; returns their ids."""
    reaped = []
    for status in LIVE:
        for session in store.list_sessions(status=status, limit=limit):
            owner = session.settings.get(OWNER)
            if not isinstance(owner, Mapping) or not gone(owner):
                continue
            reason = (
                f"its process (pid {owner['pid']}) ended without storing the session's end; "
                f"resuming continues it"
            )
            store.set_session_status(session.id, SessionStatus.ABORTED, reason=reason)
            reaped.append(session.id)
    return reaped
