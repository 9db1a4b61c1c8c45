"""Batch rollout figures for docs/benchmarks.md: sessions per minute and generated tokens per second
with 1, 4 and 16 workers against one vLLM server, in this process and as Ray tasks.

Run: `.venv/bin/python bench/batch.py [--tasks N] [--workers 1,4,16] [--no-ray]` (needs
`.venv-vllm`: `make vllm`; Ray for the Ray rows, with `--pg URL` for its store, since a
Ray batch writes to PostgreSQL). It builds the tests' tiny model, serves it with vLLM,
and runs the same batch of tasks (the `answer` task file of the batch tests: one tick,
checks that pass) at each worker count, each batch in a fresh store. The goal from the
issue: near-linear until the server saturates. On a 2-core machine the server and the
sandboxes share the two cores, so the curve flattens early; on a GPU server it goes on.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import batch as b
from agents.backends.openai_backend import OpenAIBackend
from storage import Batch, BatchStatus, TraceStore
from tests.agents.test_batch import FAST, write_tasks
from tests.backends.vllm_server import (
    SERVED_NAME,
    running_vllm_server,
    vllm_missing_reason,
    vllm_python,
)
from tests.support.tiny_model import build_tiny_model


def measure(label: str, run: Callable[[], Batch], store: TraceStore) -> str:
    started = time.monotonic()
    done = run()
    seconds = time.monotonic() - started
    assert done.status is BatchStatus.COMPLETED, done
    summary = b.summarize(store, done)
    tasks = sum(summary.counts.values())
    return (
        f"| {label} | {tasks} | {seconds:.1f} | {tasks / seconds * 60:.1f} | "
        f"{summary.tokens / seconds:.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--workers", default="1,4,16")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--pg", metavar="URL", help="PostgreSQL URL for the Ray rows")
    args = parser.parse_args()
    if vllm_python() is None:
        sys.exit(vllm_missing_reason())
    counts = [int(n) for n in args.workers.split(",")]
    rows = [
        "| run | tasks | seconds | sessions/min | generated tokens/s |",
        "|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "model")
        tasks_file, _ = write_tasks(root / "tasks", args.tasks)
        with running_vllm_server(
            model, root / "vllm", max_model_len=4096, extra_args=("--max-num-seqs", "16")
        ) as server:
            backend = OpenAIBackend(server.base_url, SERVED_NAME, timeout=120)
            for workers in counts:
                with TraceStore(root / f"local-{workers}.db") as store:
                    batch = b.start_batch(store, tasks_file, {"workers": workers})
                    context = b.WorkerContext(store, backend, FAST, root / "sessions")
                    rows.append(
                        measure(
                            f"threads x {workers}",
                            partial(b.run_local, context, batch.id, workers),
                            store,
                        )
                    )
                    print(rows[-1], flush=True)
            backend.close()
            if not args.no_ray and args.pg:
                rows += ray_rows(args, counts, server.base_url, tasks_file, root)
    print("\n".join(rows))


def ray_rows(
    args: argparse.Namespace, counts: list[int], url: str, tasks: Path, root: Path
) -> list[str]:
    import ray

    from agents.settings import Settings

    rows = []
    settings = Settings(db=args.pg, backend="openai", base_url=url, model=SERVED_NAME)
    ray.init(
        num_cpus=max(counts),
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"XDG_DATA_HOME": str(root / "data")}},
    )
    try:
        for workers in counts:
            with TraceStore(args.pg) as store:
                batch = b.start_batch(store, tasks, {"workers": workers, "ray": "local"})
                rows.append(
                    measure(
                        f"Ray x {workers}",
                        partial(
                            b.run_ray,
                            store,
                            settings,
                            FAST,
                            batch.id,
                            workers,
                            address=None,
                        ),
                        store,
                    )
                )
                print(rows[-1], flush=True)
    finally:
        ray.shutdown()
    return rows


if __name__ == "__main__":
    main()
