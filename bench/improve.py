"""Improvement between sessions on the real model: `agent-console improve`'s rounds (the
product's own `training.improve`) on the offline default model, from no operator labels.

Run: `.venv/bin/python bench/improve.py [--family compute] [--rounds 3] [--per-round 8]
[--held-out 10] [--workers 1]`.

Per round: the rollouts (sessions, solved, tokens, seconds), the checks' labels, the
training job (examples, seconds), the held-out pass rate of the new adapter and of the one
in use with 95% Wilson intervals, and the verdict. Figures go to stdout as Markdown rows
and to .bench/improve.json (`--out`); `--work DIR` keeps the store and adapters, and the
same `--work` again resumes a run that was stopped; `--report` prints a stored run's
figures without running anything.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import batch as b
from agents.adapters import use_registered_adapter
from agents.backends.offline import ensure_model
from storage import BatchStatus, TraceStore
from training.improve import THEN, ImproveConfig, Improver, SideFigures
from training.jobs import WORKER_STARTED
from training.teach import variant_options

OUT = Path(__file__).resolve().parents[1] / ".bench" / "improve.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", default="compute")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=8)
    parser.add_argument("--held-out", type=int, default=10)
    parser.add_argument(
        "--held-out-from",
        type=int,
        help="the first held-out variant measured (default: 6 for a family, as "
        "bench/learning.py's --first; 0 for a suite)",
    )
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--then", default="kto", choices=THEN)
    parser.add_argument(
        "--choose-by-checks",
        action="store_true",
        help="the rollouts run a candidate that passes the checks (improve --choose-by-checks)",
    )
    parser.add_argument("--candidates", type=int, help="(default: the model's)")
    parser.add_argument("--block-tokens", type=int, help="(default: the model's)")
    parser.add_argument("--work", type=Path, default=Path(".bench/improve-work"))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--report", action="store_true", help="only print the stored run's figures (no model)"
    )
    args = parser.parse_args()
    if args.report:
        with TraceStore(args.work / "traces.db") as stored:
            report(stored, max(stored.list_improvements(), key=lambda r: r.id), args.out)
        return
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
            held_out=args.held_out, held_out_from=first_held_out(args), workers=args.workers,
            epochs=args.epochs, then=args.then, choose_by_checks=args.choose_by_checks,
            base_model=str(model),
        )  # fmt: skip
        run = store.create_improvement(args.family, config=config.to_config())
    backend = TransformersBackend(str(model))
    # the learning bench's sessions (bench/learning.py): one tick, the product's defaults
    # for the model where it runs (the example tick, the grammar), so the two compare
    options = variant_options(
        backend, seed=0, teaching=False, attempts=1, candidates=args.candidates,
        block_tokens=args.block_tokens,
    )  # fmt: skip

    def run_batch(batch_id: int, adapter: str | None) -> BatchStatus:
        use_registered_adapter(store, backend, adapter)
        context = b.WorkerContext(store, backend, options, args.work / "sessions")
        return b.run_local(context, batch_id, int(run.config["workers"])).status

    Improver(store, run, backend, run_batch, data_dir=args.work / "data").go()
    report(store, store.get_improvement(run.id), args.out)
    backend.close()
    store.close()


def first_held_out(args: argparse.Namespace) -> int:
    """A family's held-out variants from bench/learning.py's first, so the two benches
    measure the same ones; a suite's from its first problem."""
    from agents.tasks.families import FAMILIES

    if args.held_out_from is not None:
        return int(args.held_out_from)
    return 6 if args.family in FAMILIES else 0


def batch_compute(store: TraceStore, batch_id: int) -> dict[str, Any]:
    """A batch's sessions, solved, tokens and session-seconds, from its tasks' own results
    (each session's own time: a run stopped and resumed counts each session once)."""
    results = [t.result for t in store.batch_tasks(batch_id)]
    seconds = [float(r.get("seconds", 0.0)) for r in results]
    return {
        "sessions": len(results),
        "tokens": sum(int(r.get("tokens", 0)) for r in results),
        "seconds": round(sum(seconds), 1),
        "median_session_s": round(statistics.median(seconds), 1) if seconds else None,
    }


def job_seconds(store: TraceStore, job_id: int | None) -> float | None:
    """The job's last worker's time, start to finish (a job stopped and resumed counts the
    run that finished it, not the time it lay stopped)."""
    if job_id is None:
        return None
    job = store.get_job(job_id)
    if job.started_at is None or job.finished_at is None:
        return None
    starts = [
        e.created_at
        for e in store.job_events(job_id)
        if (e.message or "").startswith(WORKER_STARTED)
    ]
    return round(job.finished_at - max(starts, default=job.started_at), 1)


def report(store: TraceStore, run: Any, out: Path) -> None:
    """The run's rounds as Markdown rows on stdout and JSON in `out`, read from the store."""
    print(
        "| round | rollouts solved | tokens | session-seconds | labels +/- | SFT (s) "
        "| preference (s) | held-out, adapter in use | held-out, new adapter | verdict |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    for this in run.state.get("rounds", []):
        if "verdict" not in this:
            continue
        figures = this.get("evaluate") or {}
        new = SideFigures(**figures["candidate"]) if "candidate" in figures else None
        current = SideFigures(**figures["current"]) if "current" in figures else None
        compute = batch_compute(store, this["batch"])
        row = {
            "round": this["round"],
            "solved": this["rollouts"]["solved"],
            "rollouts": compute,
            "labels": this["labels"],
            "sft_seconds": job_seconds(store, this.get("job")),
            "preference_seconds": job_seconds(store, this.get("prefer_job")),
            "held_out_in_use": asdict(current) if current else None,
            "held_out_new": asdict(new) if new else None,
            "verdict": this["verdict"],
            "train": this.get("train"),
            "prefer": this.get("prefer"),
        }
        rows.append(row)
        print(
            f"| {row['round']} | {row['solved']}/{compute['sessions']} | {compute['tokens']:,} "
            f"| {compute['seconds']:,.0f} | +{this['labels']['good']} -{this['labels']['bad']} "
            f"| {row['sft_seconds'] or '-'} | {row['preference_seconds'] or '-'} "
            f"| {current.adapter + ' ' + current.line() if current else '-'} "
            f"| {new.adapter + ' ' + new.line() if new else '-'} | {row['verdict']} |",
            flush=True,
        )
    held_out = {
        side: {**figures, **batch_compute(store, figures["batch"])}
        for side, figures in run.state.get("held_out", {}).items()
        if "passed" in figures
    }
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "model": f"{Path(str(run.config.get('base_model', '?'))).name} (offline)",
        "run": run.id,
        "status": run.status,
        "config": run.config,
        "rounds": rows,
        "held_out": held_out,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
