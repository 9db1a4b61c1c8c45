"""One headless tick of a real model through the real CLI: its progress lines (stderr) and
its store, for the real-model tests."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tests.app.test_cli import SCRIPT, _spawn

#: the seconds since the session started, which leads each progress line of --query
ELAPSED = re.compile(r"^ *\d+\.\d s  ")


def headless_tick(
    model: Path, task: str, tmp_path: Path, candidates: int = 2
) -> tuple[list[str], Path]:
    """One tick of `task` on `model` (`candidates` a block, one try at the action, approval
    auto, memory off): the stderr lines, their elapsed-seconds prefix dropped, and the store."""
    db = tmp_path / "traces.db"
    command = [
        str(SCRIPT), "--db", str(db), "--backend", "transformers", "--model", str(model),
        "--query", "", "--task", task, "--approval", "auto", "--max-ticks", "1",
        "--candidates", str(candidates), "--attempts", "1", "--memory", "off",
    ]  # fmt: skip
    process = _spawn(command, tmp_path)
    assert process.stderr is not None
    lines = []
    for line in process.stderr:
        lines.append(ELAPSED.sub("", line.rstrip("\n")))
        sys.stderr.write(line)
    process.wait(timeout=60)
    return lines, db
