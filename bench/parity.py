"""Headless against console: the same task, the same settings, the cost of a tick.

Run: `.venv/bin/python bench/parity.py [--runs N] [--ticks N] [--task NAME]`.

On the tests' tiny model (random weights, built in a temp folder), with the defaults the
product picks for it and `approval auto`, each run times one session of `--ticks` ticks
- headless: `agent-console --query "" --task NAME` in a subprocess, memory on and off;
- console: the Textual app driven by Pilot, starting the same task in its live session.
Each store first gets two finished sessions, as a user's has, so the retrieval memory is
in play where it is on. A tick's cost is read from the store: the time from the session's
first block to its last, over its ticks (model loading and start-up left out). Prints
the median seconds a tick of each, and the ratio console / headless of each run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agents.settings import Settings  # noqa: E402
from agents.tasks import load_task  # noqa: E402
from storage import TraceStore  # noqa: E402
from tests.support.tiny_model import build_tiny_model  # noqa: E402

SCRIPT = Path(sys.executable).with_name("agent-console")


def seed_sessions(db: Path, model: Path, task: str, env: dict[str, str]) -> None:
    """Two short finished sessions, so a store looks like one in use."""
    for _ in range(2):
        headless(db, model, task, 1, env, memory="off")


def headless(
    db: Path, model: Path, task: str, ticks: int, env: dict[str, str], memory: str
) -> None:
    command = [
        str(SCRIPT),
        "--db",
        str(db),
        "--backend",
        "transformers",
        "--model",
        str(model),
        "--query",
        "",
        "--task",
        task,
        "--approval",
        "auto",
        "--max-ticks",
        str(ticks),
        "--memory",
        memory,
    ]
    subprocess.run(command, env=env, capture_output=True, check=False, timeout=1800)


def console(db: Path, model: Path, task: str, ticks: int) -> None:
    from app.console import ConsoleApp

    settings = Settings(backend="transformers", model=str(model), approval="auto", max_ticks=ticks)

    async def drive() -> None:
        with TraceStore(db) as store:
            app = ConsoleApp(store=store, settings=settings, task=load_task(task))
            async with app.run_test(size=(140, 44)) as pilot:
                await pilot.pause(1.0)
                deadline = time.monotonic() + 1800
                while app.main.live is not None or not finished(store):
                    if time.monotonic() > deadline:
                        raise RuntimeError("the console's session did not end")
                    await pilot.pause(0.2)

    asyncio.run(drive())


def finished(store: TraceStore) -> bool:
    last = store.list_sessions(limit=1)
    return bool(last) and last[0].status.value != "running"


def tick_seconds(db: Path) -> float:
    """Seconds a tick of the newest session: first block to last, over its ticks."""
    with TraceStore(db) as store:
        session = store.list_sessions(limit=1)[0]
        nodes = store.tree(session.id)
    ticks = max(n.tick for n in nodes) or 1
    return (max(n.created_at for n in nodes) - min(n.created_at for n in nodes)) / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ticks", type=int, default=2)
    parser.add_argument("--task", default="csv_summary")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="parity-"))
    model = build_tiny_model(scratch / "model")
    env = {**os.environ, "XDG_DATA_HOME": str(scratch / "data")}
    os.environ["XDG_DATA_HOME"] = env["XDG_DATA_HOME"]
    figures: dict[str, list[float]] = {"headless": [], "headless-no-memory": [], "console": []}
    ratios = []
    for run in range(args.runs):
        db = scratch / f"run{run}.db"
        seed_sessions(db, model, args.task, env)
        headless(db, model, args.task, args.ticks, env, memory="on")
        figures["headless"].append(tick_seconds(db))
        headless(db, model, args.task, args.ticks, env, memory="off")
        figures["headless-no-memory"].append(tick_seconds(db))
        console(db, model, args.task, args.ticks)
        figures["console"].append(tick_seconds(db))
        ratios.append(figures["console"][-1] / figures["headless"][-1])
        print(
            f"run {run + 1}: "
            + ", ".join(f"{k} {v[-1]:.1f} s/tick" for k, v in figures.items())
            + f", console/headless {ratios[-1]:.2f}",
            flush=True,
        )
    print(f"task {args.task}, {args.ticks} ticks, tiny model, approval auto, median of {args.runs}")
    for name, values in figures.items():
        print(f"  {name:20} {statistics.median(values):6.1f} s a tick")
    print(f"  console / headless   {statistics.median(ratios):6.2f}")


if __name__ == "__main__":
    main()
