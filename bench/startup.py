"""Console start-up: from launching Python to the console's first frame, on a real store.

Run: `.venv/bin/python bench/startup.py`. The child process imports the app, opens the
store and runs the console headless (Textual's test driver); it prints a marker once the
first frame is up, and the parent times launch to marker.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = """
import asyncio, sys
from agents.settings import Settings
from app.console import ConsoleApp
from storage import TraceStore

async def main():
    with TraceStore(sys.argv[1]) as store:
        app = ConsoleApp(store=store, settings=Settings())
        async with app.run_test() as pilot:
            await pilot.pause()
            print("frame", flush=True)
            print("heavy" if {"torch", "transformers"} & set(sys.modules) else "light", flush=True)

asyncio.run(main())
"""


def first_frame(db: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    elapsed = time.perf_counter() - start
    imports = proc.stdout.readline().strip()
    proc.wait(timeout=30)
    if line != "frame":
        raise SystemExit(f"the console did not draw a frame (exit {proc.returncode})")
    return elapsed, imports


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "startup.db"
        times = []
        for _ in range(5):
            elapsed, imports = first_frame(db)
            times.append(elapsed)
        print(
            f"console first frame: {times[0] * 1000:.0f} ms first run, "
            f"{statistics.median(times) * 1000:.0f} ms median   (goal: well under 1 s; "
            f"heavy libraries loaded: {'yes' if imports == 'heavy' else 'no'})"
        )


if __name__ == "__main__":
    main()
