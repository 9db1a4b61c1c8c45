"""How fast a model wrote on this machine: the last measured block and tick, kept per
model and device in a small file beside the trace store, so that a session's first line
can say what a tick will cost before its own first block is written."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

#: The file, in the trace store's folder.
SPEED_FILE = "speed.json"


@dataclass(frozen=True, slots=True)
class Measured:
    """One block of candidates as it was last written here, and the model's time of the
    session's first whole tick (every round of its blocks), once one was."""

    candidates: int
    seconds: float
    tokens_per_second: float | None
    #: the day it was measured (ISO)
    day: str
    tick_seconds: float | None = None


def speed_file(store_url: str) -> Path | None:
    """Where the measurements of the store at `store_url` live (None: a store in memory
    or on a server, with no folder of its own)."""
    from storage.engine import sqlite_path

    path = sqlite_path(store_url)
    if path is None or str(path) == ":memory:":
        return None
    return path.parent / SPEED_FILE


def _key(model: str, device: str) -> str:
    return f"{device} {model}"


def _read(path: Path) -> dict[str, dict]:
    """The file's entries; none where it is missing or unreadable (it is only a hint)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def remember(path: Path, model: str, device: str, measured: Measured) -> None:
    """Keep `measured` as the model's speed on `device` (written whole, then renamed: a
    reader never sees half a file). A folder that cannot be written loses only the hint."""
    entries = _read(path)
    entries[_key(model, device)] = asdict(measured)
    try:
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=".speed-", suffix=".json", delete=False
        ) as out:
            json.dump(entries, out, indent=1, sort_keys=True)
        os.replace(out.name, path)
    except OSError:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(out.name)


def recalled(path: Path, model: str, device: str) -> Measured | None:
    """The model's last measured block on `device`, if one was kept and reads right."""
    entry = _read(path).get(_key(model, device))
    if not isinstance(entry, dict):
        return None
    try:
        return Measured(
            candidates=int(entry["candidates"]),
            seconds=float(entry["seconds"]),
            tokens_per_second=(
                None
                if entry.get("tokens_per_second") is None
                else float(entry["tokens_per_second"])
            ),
            day=str(entry["day"]),
            tick_seconds=(
                None if entry.get("tick_seconds") is None else float(entry["tick_seconds"])
            ),
        )
    except (KeyError, TypeError, ValueError):
        return None


def today() -> str:
    return date.today().isoformat()
