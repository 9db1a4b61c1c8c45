"""Console start-up: from launching Python to the console's first frame, on a real store,
against a bare Textual app (one Static) measured the same way in the same run.

Run: `.venv/bin/python bench/startup.py [--runs N]`. Each child imports its app and runs it
headless (Textual's test driver); the console is given its database as the command line
gives it in a terminal (the store opens after the first frame). The child prints a marker
when Textual hands its first frame to the driver, and the parent times launch to marker. The
two alternate, and the ratio is taken pair by pair. Our packages are compiled to bytecode
first, as installing them does (Textual's files are, and this machine sets
PYTHONDONTWRITEBYTECODE).
"""

from __future__ import annotations

import compileall
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOOK = """
import asyncio, os, sys
from textual.app import App

_display = App._display

def first_display(self, screen, renderable):
    # the first frame Textual hands to its driver (headless here, so not written)
    if renderable is not None and not getattr(App, "drawn", False):
        App.drawn = True
        print("frame", flush=True)
        loaded = {"torch", "transformers", "sqlalchemy"} & set(sys.modules)
        print(",".join(sorted(loaded)) or "none", flush=True)
    _display(self, screen, renderable)

App._display = first_display
"""

CHILD = (
    HOOK
    + """
from agents.settings import Settings
from app.console import ConsoleApp

async def main():
    app = ConsoleApp(database=sys.argv[1], settings=Settings())
    async with app.run_test() as pilot:
        while not getattr(App, "drawn", False):
            await pilot.pause(0.01)
        os._exit(0)

asyncio.run(main())
"""
)

BARE = (
    HOOK
    + """
from textual.widgets import Static

class Bare(App):
    def compose(self):
        yield Static("bare")

async def main():
    async with Bare().run_test() as pilot:
        while not getattr(App, "drawn", False):
            await pilot.pause(0.01)
        os._exit(0)

asyncio.run(main())
"""
)


def first_frame(db: Path, child: str = CHILD) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", child, str(db)], stdout=subprocess.PIPE, text=True
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
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 7
    root = Path(__file__).resolve().parent.parent
    for package in ("app", "agents", "storage", "training"):
        compileall.compile_dir(root / package, quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "startup.db"
        from storage import TraceStore

        TraceStore(db).close()
        first_frame(db)  # warms the file cache; not counted
        first_frame(db, BARE)
        times, bare, ratios = [], [], []
        for _ in range(runs):
            elapsed, imports = first_frame(db)
            baseline, _ = first_frame(db, BARE)
            times.append(elapsed)
            bare.append(baseline)
            ratios.append(elapsed / baseline)
        print(
            f"console first frame: {statistics.median(times) * 1000:.0f} ms median, "
            f"bare Textual app {statistics.median(bare) * 1000:.0f} ms, ratio "
            f"{statistics.median(ratios):.2f}x median of {runs} pairs "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f}; goal: within 1.5x; "
            f"loaded before the first frame, of torch, transformers, sqlalchemy: {imports})"
        )


if __name__ == "__main__":
    main()
