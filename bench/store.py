"""Trace-store figures for docs/benchmarks.md: insert rate, whole-tree load, CLI start.

Run: `make bench` (or `.venv/bin/python bench/store.py [--db URL]`). Goals from the
foundation issue: >= 20,000 nodes/s inserted in batches; a 10,000-node session's whole
tree loaded in < 200 ms; `agent-console --version` cold in < 0.5 s.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from storage import NewNode, NodeStatus, TraceStore

KINDS = ["orientation", "action", "expectation", "evaluation", "outcome"]
BLOCK = "def action_check(subagent):\n    return subagent.tools['editor'].read('notes.txt')\n" * 4


def make_batch(size: int, tick: int, rng: random.Random) -> list[NewNode]:
    """A tick's worth of blocks: a chain, with candidates carrying tokens and logprobs."""
    batch: list[NewNode] = []
    for i in range(size):
        batch.append(
            NewNode(
                kind=KINDS[i % len(KINDS)],
                text=BLOCK,
                tick=tick,
                parent_index=i - 1 if i else None,
                status=NodeStatus.CHOSEN,
                score=rng.uniform(-3, 3),
                score_parts={"logit": rng.uniform(-3, 3), "lint": -0.5},
                token_ids=[rng.randrange(50_000) for _ in range(64)],
                logprobs=[round(-rng.random(), 4) for _ in range(64)],
                sampling={"temperature": 0.8, "n": 4},
            )
        )
    return batch


def bench_inserts(store: TraceStore, total: int, batch: int) -> float:
    rng = random.Random(0)
    session = store.create_session("insert benchmark")
    batches = [make_batch(batch, t, rng) for t in range(total // batch)]
    start = time.perf_counter()
    for nodes in batches:
        store.add_nodes(session.id, nodes)
    return total / (time.perf_counter() - start)


def bench_tree(store: TraceStore, size: int, runs: int = 7) -> tuple[float, float]:
    rng = random.Random(1)
    session = store.create_session("tree benchmark")
    for t in range(size // 500):
        store.add_nodes(session.id, make_batch(500, t, rng))
    assert store.count_nodes(session.id) == size
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        nodes = store.tree(session.id)
        times.append(time.perf_counter() - start)
        assert len(nodes) == size
    return statistics.median(times), max(times)


def bench_version(runs: int = 10) -> tuple[float, float]:
    exe = shutil.which("agent-console") or str(Path(sys.executable).with_name("agent-console"))
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([exe, "--version"], check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return times[0], statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", help="store URL (default: a fresh SQLite file in a temp dir)")
    parser.add_argument("--nodes", type=int, default=50_000, help="nodes for the insert runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        db = args.db or str(Path(tmp) / "bench.db")
        with TraceStore(db) as store:
            print(f"store: {store.where}")
            for batch in (100, 1000):
                rate = bench_inserts(store, args.nodes, batch)
                print(f"insert, batches of {batch:>4}: {rate:>9,.0f} nodes/s   (goal >= 20,000)")
            median, worst = bench_tree(store, 10_000)
            print(
                f"whole tree, 10,000 nodes:   {median * 1000:>6.1f} ms median, "
                f"{worst * 1000:.1f} ms worst   (goal < 200 ms)"
            )
    first, median = bench_version()
    print(
        f"agent-console --version:    {first * 1000:>6.1f} ms first run, "
        f"{median * 1000:.1f} ms median   (goal < 500 ms)"
    )


if __name__ == "__main__":
    main()
