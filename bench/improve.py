"""Improvement between sessions on the real model: `agent-console improve`'s rounds (the
product's own `training.improve`) on the offline Gemma 3 270M base, from no operator labels.

Run: `.venv/bin/python bench/improve.py [--family compute] [--rounds 3] [--per-round 8]
[--held-out 10] [--workers 1]`.

Per round: the rollouts (sessions, solved, tokens, seconds), the checks' labels, the
training job (examples, seconds), the held-out pass rate of the new adapter and of the one
in use with 95% Wilson intervals, and the verdict. Figures go to stdout as Markdown rows
and to .bench/improve.json (`--out`); `--work DIR` keeps the store and adapters, and the
same `--work` again resumes a run that was stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import batch as b
from agents.backends.offline import ensure_model
from agents.runtime import RunOptions
from agents.workbench import use_registered_adapter
from storage import BatchStatus, TraceStore
from training.improve import ImproveConfig, Improver, SideFigures

OUT = Path(__file__).resolve().parents[1] / ".bench" / "improve.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="compute")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=8)
    parser.add_argument("--held-out", type=int, default=10)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--then", default="kto", choices=("kto", "dpo", "none"))
    parser.add_argument("--candidates", type=int, default=2)
    parser.add_argument("--block-tokens", type=int, default=192)
    parser.add_argument("--work", type=Path, default=Path(".bench/improve-work"))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    model = ensure_model(print)

    from agents.backends.transformers_backend import TransformersBackend

    args.work.mkdir(parents=True, exist_ok=True)
    store = TraceStore(args.work / "traces.db")
    runs = [r for r in store.list_improvements() if r.status != "completed"]
    if runs:
        run = runs[0]
    else:
        config = ImproveConfig(
            family=args.family, rounds=args.rounds, per_round=args.per_round,
            held_out=args.held_out, workers=args.workers, epochs=args.epochs, then=args.then,
            base_model=str(model),
        )  # fmt: skip
        run = store.create_improvement(args.family, config=config.to_config())
    backend = TransformersBackend(str(model))
    options = RunOptions(
        candidates=args.candidates, escalation=(), block_tokens=args.block_tokens,
        max_ticks=1, approval="auto", memory=False, attempts=1,
    )  # fmt: skip

    def run_batch(batch_id: int, adapter: str | None) -> BatchStatus:
        use_registered_adapter(store, backend, adapter)
        context = b.WorkerContext(store, backend, options, args.work / "sessions")
        return b.run_local(context, batch_id, int(run.config["workers"])).status

    started = time.perf_counter()
    improver = Improver(store, run, backend, run_batch, data_dir=args.work / "data")
    done = improver.go()
    rows: list[dict[str, Any]] = []
    print(
        "| round | solved | labels +/- | SFT (s) | preference (s) | held-out new | held-out in use "
        "| verdict |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for this in done.state["rounds"]:
        figures = this.get("evaluate") or {}
        new = SideFigures(**figures["candidate"]).line() if "candidate" in figures else "-"
        current = SideFigures(**figures["current"]).line() if "current" in figures else "-"
        roll, labels, train = this["rollouts"], this["labels"], this["train"]
        print(
            f"| {this['round']} | {roll['solved']}/{roll['n']} ({roll['tokens']:,} tokens) "
            f"| +{labels['good']} -{labels['bad']} | {train.get('seconds', '-')} "
            f"| {this.get('prefer', {}).get('seconds', '-')} | {new} "
            f"| {current} | {this['verdict']} |",
            flush=True,
        )
        rows.append(this)
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "model": "gemma-3-270m (offline)",
        "config": done.config,
        "rounds": rows,
        "held_out": done.state.get("held_out"),
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    backend.close()
    store.close()


if __name__ == "__main__":
    main()
