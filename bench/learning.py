"""Does teaching carry over? The offline real model (the default, or `--model`) on held-out
variants of the task families, before and after a scripted operator teaches it on other
variants.

Run: `.venv/bin/python bench/learning.py [--teach 5,10,20] [--held-out 10] [--kinds sft,dpo,kto]`.

- Base: the model alone (`--approval auto`, one tick) on each taught family's held-out
  variants (`--held-out` per family) and on the never-taught family's: pass rate (the
  task's checks) with its 95% interval (Wilson), and the share of sessions whose chosen
  action ran, whose evaluation ran and registered a check that ran, and whose orientation
  names the variant's files.
- Teaching: the scripted operator (`training.teach`) on teaching variants, families in turn,
  through the runtime's approval gate and the store's labels; its actions are counted.
- After each count of teaching sessions in `--teach`: an adapter trained with the product's
  own job (`training.jobs.queue_job`, a detached worker, as `agent-console train`) on
  every label so far, loaded into the running backend, and the held-out set again with the
  same seeds. At the last count, each kind in `--kinds`. The time from the last label to
  the adapter in use is reported.

`--base-only` stops after the base; `--skip-base` teaches and trains only.
`--teaching-from training/starter_sessions.db` takes the first N stored teaching sessions
(the starter sessions, made by the same scripted operator) for each point instead of
teaching anew, and counts the operator's actions in them.

Figures go to stdout as Markdown rows and to .bench/learning.json (`--out`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import blocks, forms
from agents.backends.offline import ensure_model
from agents.batch import wilson
from agents.runtime import Outcome, RunOptions, Runtime, session_solved
from agents.tasks.families import Variant, family_names, split, variant
from storage import EvaluationKind, JobKind, JobStatus, NodeStatus, TraceStore
from training.jobs import JobOptions, copy_sqlite, follow, queue_job
from training.teach import (
    ScriptedOperator,
    Tally,
    names_the_task,
    teach_sessions,
    teaching_order,
    variant_options,
)

OUT = Path(__file__).resolve().parents[1] / ".bench" / "learning.json"


def options(backend: Any, args: argparse.Namespace, seed: int, teaching: bool) -> RunOptions:
    return variant_options(
        backend,
        seed=seed,
        teaching=teaching,
        attempts=args.attempts,
        candidates=args.candidates,
        block_tokens=args.block_tokens,
    )


def judge(store: TraceStore, session_id: int, found: Variant, form: str) -> dict[str, bool]:
    """What one held-out session did: solved, and whether its chosen blocks stand."""
    tree = store.tree(session_id)
    outcome = [n for n in tree if n.kind == blocks.OUTCOME]
    solved = session_solved(store, session_id)
    action = any(n.kind == blocks.ACTION and n.status is NodeStatus.EXECUTED for n in tree)
    ran: set[str] = set()
    for node in outcome:
        for result in store.evaluations(node.id):
            if result.kind is EvaluationKind.CALLBACK and result.error is None:
                ran.add(result.name)
    evaluation = any(
        n.kind == blocks.EVALUATION
        and n.status is NodeStatus.EXECUTED
        and forms.title(n.kind, form, n.text) in ran
        for n in tree
    )
    orientation = any(
        n.kind == blocks.ORIENTATION
        and n.status is NodeStatus.CHOSEN
        and names_the_task(n.text, found)
        for n in tree
    )
    return {
        "solved": solved,
        "action": action,
        "evaluation": evaluation,
        "orientation": orientation,
    }


def held_out(
    backend: Any,
    store: TraceStore,
    variants: Iterable[Variant],
    args: argparse.Namespace,
    work: Path,
) -> dict[str, Any]:
    """The model alone on `variants`; rates per family and over the taught families."""
    rows: dict[str, list[dict[str, bool]]] = {}
    started = time.perf_counter()
    for found in variants:
        runtime = Runtime(
            store,
            backend,
            found.task,
            options(backend, args, found.seed, teaching=False),
            sessions_dir=work / "sessions",
        )
        outcome = runtime.run()
        judged = judge(store, outcome.session_id, found, runtime.options.form)
        rows.setdefault(found.family, []).append(judged)
    result: dict[str, Any] = {"seconds": round(time.perf_counter() - started, 1)}
    taught = [r for family, got in rows.items() if family in args.families for r in got]
    for name, got in [("taught", taught), *rows.items()]:
        n = len(got)
        passed = sum(r["solved"] for r in got)
        low, high = wilson(passed, n)
        result[name] = {
            "n": n,
            "pass_rate": round(passed / n, 3) if n else None,
            "ci95": [round(low, 3), round(high, 3)],
            **{
                f"{key}_valid": round(sum(r[key] for r in got) / n, 3) if n else None
                for key in ("action", "evaluation", "orientation")
            },
        }
    return result


def teach(
    backend: Any,
    store: TraceStore,
    variants: list[Variant],
    args: argparse.Namespace,
    work: Path,
    tally: Tally,
) -> Tally:
    def runtime_for(found: Variant, operator: ScriptedOperator) -> Runtime:
        return Runtime(
            store,
            backend,
            found.task,
            options(backend, args, 1000 + found.seed, teaching=True),
            sessions_dir=work / "sessions",
            asker=operator,
        )

    def solved(outcome: Outcome) -> bool:
        return session_solved(store, outcome.session_id)

    more = teach_sessions(variants, runtime_for, solved)
    for key in ("approved", "rejected", "edited", "rewritten", "labelled"):
        setattr(tally, key, getattr(tally, key) + getattr(more, key))
    tally.sessions.extend(more.sessions)
    return tally


def train(
    backend: Any,
    store: TraceStore,
    kind: JobKind,
    name: str,
    args: argparse.Namespace,
    work: Path,
    sessions: list[int] | None = None,
) -> dict[str, Any]:
    """Train with the product's job, load the adapter; seconds from queueing to in use."""
    started = time.perf_counter()
    options = JobOptions(
        kind=kind,
        base_model=str(args.model),
        name=name,
        epochs=args.epochs,
        learning_rate=args.lr.get(kind.value),
        max_length=args.max_length,
        save_steps=10_000,
        start_from=args.start_from.get(kind.value, "").replace("N", name.split("-")[-1]) or None,
        labels_from=str(args.teaching_from) if args.teaching_from else None,
        sessions=tuple(sessions) if sessions else None,
    )
    job = queue_job(store, options, data_dir=work / "data")
    for _ in follow(store, job.id, poll=1.0):
        pass
    job = store.get_job(job.id)
    if job.status is not JobStatus.COMPLETED:
        raise SystemExit(f"training {name} ended {job.status.value}: {job.error}")
    adapter = store.get_adapter(name)
    backend.load_adapter(adapter.name, adapter.path)
    backend.use_adapter(adapter.name)
    return {
        "rows": job.config.get("rows_at_queue"),
        "label_to_adapter_s": round(time.perf_counter() - started, 1),
        "train_loss": adapter.metrics.get("train_loss"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--families", default="fix_bug,compute,transform")
    parser.add_argument("--untaught", default=",".join(family_names(taught=False)))
    parser.add_argument("--teach", default="5,10,20", help="teaching sessions at each point")
    parser.add_argument("--held-out", type=int, default=10, help="held-out variants per family")
    parser.add_argument("--kinds", default="sft,dpo,kto", help="kinds trained at the last point")
    parser.add_argument("--candidates", type=int, help="(default: the model's)")
    parser.add_argument("--block-tokens", type=int, help="(default: the model's)")
    parser.add_argument("--attempts", type=int, default=1)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--lr", default="sft=2e-4,dpo=5e-5,kto=5e-5")
    parser.add_argument(
        "--start-from",
        default="dpo=sft-N",
        help="kind=adapter each kind starts from (N: the point); empty: from the base",
    )
    parser.add_argument("--max-length", type=int, default=3072)
    parser.add_argument("--base-only", action="store_true", help="measure the base, no teaching")
    parser.add_argument("--skip-base", action="store_true", help="teach and train only")
    parser.add_argument("--work", type=Path, help="keep the store and adapters in this folder")
    parser.add_argument("--out", type=Path, default=OUT, help="where the figures go (JSON)")
    parser.add_argument(
        "--teaching-from",
        type=Path,
        help="train on the first N sessions of this store (the starter sessions) instead of "
        "teaching anew",
    )
    args = parser.parse_args()
    args.families = args.families.split(",")
    args.lr = {k: float(v) for k, v in (p.split("=") for p in args.lr.split(","))}
    args.start_from = dict(p.split("=") for p in args.start_from.split(",") if p)
    args.model = ensure_model(print)
    points = [int(p) for p in args.teach.split(",")]
    kinds = [JobKind(k) for k in args.kinds.split(",")]
    families = args.families + [f for f in args.untaught.split(",") if f]
    measured = [variant(f, split(f)[1][i]) for i in range(args.held_out) for f in families]

    from agents.backends.transformers_backend import TransformersBackend

    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "args": vars(args) | {}}
    results["args"]["model"] = f"{Path(args.model).name} (offline)"
    backend = TransformersBackend(str(args.model))
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        store = TraceStore(work / "traces.db")
        if not args.skip_base:
            base = held_out(backend, store, measured, args, work / "base")
            results["base"] = base
            print(f"| base | 0 | {json.dumps(base)} |", flush=True)
        if args.base_only:
            points = []
        tally = Tally()
        order = teaching_order(args.families, max(points, default=0))
        assert not {(v.family, v.seed) for v in order} & {(v.family, v.seed) for v in measured}
        taught = 0
        stored: list[int] = []
        source_copy = work / "teaching.db"
        if args.teaching_from:
            # read from a copy: the shipped file is never opened for writing
            copy_sqlite(args.teaching_from, source_copy)
            with TraceStore(source_copy) as source:
                stored = sorted(source.session_ids())
                names = [source.get_session(i).settings["task"]["name"] for i in stored]
            assert names[: len(order)] == [f"{v.family}:{v.seed}" for v in order], names
        for point in points:
            backend.use_adapter(None)
            if stored:
                with TraceStore(source_copy) as source:
                    tally = Tally.read(source, stored[:point])
            else:
                teach(backend, store, order[taught:point], args, work / f"teach{point}", tally)
            taught = point
            for kind in kinds if point == points[-1] else [JobKind.SFT]:
                name = f"{kind.value}-{point}"
                trained = train(backend, store, kind, name, args, work, stored[:point])
                after = held_out(backend, store, measured, args, work / name)
                row = {"teaching": point, "operator": tally.as_json(), **trained, **after}
                results[name] = row
                print(f"| {kind.value} | {point} | {json.dumps(row)} |", flush=True)
                backend.use_adapter(None)
        store.close()
    backend.close()
    args.out.parent.mkdir(exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
