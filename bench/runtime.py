"""Runtime figures for docs/benchmarks.md: what a tick costs beyond the model, and what the
sandbox costs.

Run: `.venv/bin/python bench/runtime.py [--ticks N] [--launches N]`.

- tick overhead: whole ticks of a real session (the tests' tiny model, the real sandbox,
  a SQLite store in a temp folder, the `auto` policy) with the time spent inside the
  backend's `generate` and `score_yes_no` taken out: what is left is the runtime's own
  work (rendering the context, ranking, storing every candidate, the gate, the sandbox
  round trips for the action, the evaluations and the observation views). Goal < 50 ms.
- sandbox: launch a fresh kernel, run a trivial action, get its result, stop it; and a
  trivial call to a kernel that is already running. Goal < 50 ms for launch to result.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.backends.transformers_backend import TransformersBackend
from agents.events import NodeChanged, RuntimeEvent
from agents.runtime import RunOptions, Runtime
from agents.sandbox import Kernel
from agents.tasks import Task
from storage import TraceStore
from tests.support.tiny_model import build_tiny_model

TRIVIAL = 'self.add_action("noop", lambda subagent: 1)'

TASK = Task(
    name="bench",
    title="Benchmark",
    prompt="Write anything to notes.txt.",
    files={"notes.txt": "start\n"},
    # never met by the tests' random model, so the session runs every tick it is given
    checks="def check_notes(subagent):\n    return subagent.read_file('notes.txt') == 'done'\n"
    "self.add_evaluation('check_notes', check_notes)\n",
    check_names=("check_notes",),
    source="bench",
)


class Timed:
    """Wraps a backend's model calls with a stopwatch (everything else passes through)."""

    def __init__(self, backend: TransformersBackend) -> None:
        self._backend = backend
        self.model_seconds = 0.0

    def _timed(self, name: str) -> Callable[..., Any]:
        call = getattr(self._backend, name)

        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.model_seconds += time.perf_counter() - started

        return run

    def __getattr__(self, name: str) -> Any:
        # tokenizing (to fit the context) is the runtime's own work, so it is not taken out
        if name in ("generate", "score_yes_no"):
            return self._timed(name)
        return getattr(self._backend, name)


def tick_overhead(model_dir: Path, ticks: int) -> list[str]:
    backend = Timed(TransformersBackend(str(model_dir)))
    gc.freeze()  # as `--query` does once the model is loaded
    per_tick: list[float] = []
    with tempfile.TemporaryDirectory() as folder, TraceStore(Path(folder) / "t.db") as store:
        starts: list[tuple[float, float]] = []

        def listen(event: RuntimeEvent) -> None:
            if isinstance(event, NodeChanged) and event.node.kind == "task-reminder":
                starts.append((time.perf_counter(), backend.model_seconds))

        options = RunOptions(
            candidates=4,
            escalation=(),
            block_tokens=32,
            max_ticks=ticks + 1,
            approval="auto",
            seed=0,
        )
        runtime = Runtime(
            store,
            backend,  # type: ignore[arg-type]
            TASK,
            options,
            sessions_dir=Path(folder) / "sessions",
            listener=listen,
        )
        outcome = runtime.run()
        if len(starts) < 3:
            raise SystemExit(f"the session ended after {len(starts)} ticks: {outcome.reason}")
        starts.append((time.perf_counter(), backend.model_seconds))
        for (t0, m0), (t1, m1) in itertools.pairwise(starts[1:]):
            per_tick.append((t1 - t0) - (m1 - m0))  # the first tick warms caches up
    ms = sorted(x * 1000 for x in per_tick)
    return [
        f"tick overhead excluding model time, {len(ms)} ticks (4 candidates per block): "
        f"median {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms (goal < 50 ms)"
    ]


def sandbox(launches: int) -> list[str]:
    cold: list[float] = []
    warm: list[float] = []
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(launches):
            started = time.perf_counter()
            with Kernel(Path(folder)) as kernel:
                kernel.start()
                kernel.exec_block(TRIVIAL)
                result = kernel.call_action("noop")
                cold.append(time.perf_counter() - started)
                assert result.ok and result.value == 1, result
                for _ in range(20):
                    started = time.perf_counter()
                    kernel.call_action("noop")
                    warm.append(time.perf_counter() - started)
    cold_ms = sorted(x * 1000 for x in cold)
    warm_ms = sorted(x * 1000 for x in warm)
    return [
        f"sandbox launch to result (start, define, call, stop), {len(cold_ms)} launches: "
        f"median {statistics.median(cold_ms):.1f} ms, p90 "
        f"{cold_ms[int(len(cold_ms) * 0.9)]:.1f} ms (goal < 50 ms)",
        f"call to a running kernel: median {statistics.median(warm_ms):.2f} ms",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--launches", type=int, default=30)
    args = parser.parse_args()
    for line in sandbox(args.launches):
        print(line, flush=True)
    with tempfile.TemporaryDirectory() as folder:
        model = build_tiny_model(Path(folder) / "model")
        for line in tick_overhead(model, args.ticks):
            print(line, flush=True)


if __name__ == "__main__":
    main()
