"""Does teaching carry over? The offline default model on held-out
variants of the task families, before and after a scripted operator teaches it on other
variants.

Run: `.venv/bin/python bench/learning.py [--teach 5,10,20] [--held-out 10] [--kinds sft,dpo,kto]
[--suite humaneval:held-out] [--work .bench/learning-work]`.

- Base: the model alone (`--approval auto`, one tick, the model's defaults) on each taught
  family's held-out variants (`--held-out` per family, from the `--first`-th: those before
  it were looked at while the coder's prompts were written) and on the never-taught
  family's: pass rate (the task's checks) with its 95% interval (Wilson), and the share of
  sessions whose chosen action ran, whose evaluation ran, and whose orientation names the
  variant's files. `--suite` measures a never-taught suite too (HumanEval's default set,
  as bench/humaneval.py's agent runs it: up to `--suite-ticks` ticks).
- Teaching: the scripted operator (`training.teach`) on teaching variants, families in turn,
  through the runtime's approval gate and the store's labels, writing its blocks in the
  sessions' form (script blocks for the coder); its actions are counted.
- After each count of teaching sessions in `--teach`: an adapter trained with the product's
  own job (`training.jobs.queue_job`, a detached worker, as `agent-console train`) on the
  labels of the teaching sessions (asserted to hold no held-out variant), loaded into the
  running backend, and the held-out set again with the same seeds. At the last count, each
  kind in `--kinds` (DPO and KTO start from that count's SFT adapter). The time from the
  last label to the adapter in use is reported (the job on every core: the bench waits).

`--base-only` stops after the base; `--skip-base` teaches and trains only.
`--teaching-from training/starter_sessions.db` takes the first N stored teaching sessions
(the starter sessions, made by the same scripted operator) for each point instead of
teaching anew, and counts the operator's actions in them.

Everything done is kept under `--work` (the trace store, the adapters, one JSON line per
session measured, session taught and adapter trained): the same `--work` again resumes a
stopped run. Other training settings (`--epochs`, `--lr`, `--changed-only`, ...) with a
`--tag` train more adapters in the same `--work`, measured against its base. Figures go
to stdout as Markdown rows and to .bench/learning.json (`--out`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import blocks, forms
from agents.backends.offline import DEFAULT, ensure_model
from agents.batch import wilson
from agents.runtime import Outcome, RunOptions, Runtime, own_check_name, session_solved
from agents.settings import Settings
from agents.tasks import Task
from agents.tasks.families import Variant, family_names, parse_name, split, variant
from storage import EvaluationKind, Job, JobKind, JobStatus, NodeStatus, TraceStore
from training.jobs import JobOptions, copy_sqlite, follow, queue_job, resume_job
from training.teach import (
    HeldOutError,
    ScriptedOperator,
    Tally,
    check_teaching,
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
        and own_check_name(forms.title(n.kind, form, n.text) or "", found.task) in ran
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


class Kept:
    """What a run has done, one JSON line each in `<work>/rows.jsonl`: a held-out
    session's verdict (`point`, `ref`), a teaching session (`taught`), an adapter trained
    (`trained`). The same `--work` again resumes: nothing kept is done twice. Where only
    `rows.jsonl` and `run.json` were kept (bench/results), the verdicts stand and what
    the lost store held, teaching sessions and adapters, is done again."""

    def __init__(self, work: Path) -> None:
        self.path = work / "rows.jsonl"
        self.rows: list[dict[str, Any]] = []
        if self.path.exists():
            lines = self.path.read_text().splitlines()
            for i, line in enumerate(lines):
                try:
                    self.rows.append(json.loads(line))
                except ValueError:
                    if i < len(lines) - 1:
                        raise
                    # the last line, half written when a run was stopped: dropped
                    self.path.write_text("".join(f"{x}\n" for x in lines[:-1]))

    def add(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        with self.path.open("a") as out:
            out.write(json.dumps(row) + "\n")

    def measured(self, point: str) -> dict[str, dict[str, Any]]:
        return {r["ref"]: r for r in self.rows if r.get("point") == point}

    def taught(self) -> dict[str, int]:
        return {r["taught"]: r["session"] for r in self.rows if "taught" in r}

    def trained(self, name: str) -> dict[str, Any] | None:
        """Adapter `name`'s row, the last where it was trained again."""
        return next((r for r in reversed(self.rows) if r.get("trained") == name), None)


def suite_tasks(spec: str) -> list[tuple[str, Task]]:
    """(problem id, task) of each problem of a suite selection (`humaneval:held-out`)."""
    if not spec:
        return []
    from agents.tasks.suites import parse_ref, problem_task

    suite, selection = parse_ref(spec)
    return [(p.task_id, problem_task(suite, p)) for p in suite.select(selection)]


def held_out(
    backend: Any,
    store: TraceStore,
    variants: Iterable[Variant],
    args: argparse.Namespace,
    work: Path,
    kept: Kept,
    point: str,
) -> dict[str, Any]:
    """The model alone on `variants` (one tick each) and the suite's problems (as
    bench/humaneval.py runs them); rates per family, over the taught families and on the
    suite. Sessions kept for `point` are not run again."""
    done = kept.measured(point)
    variants = list(variants)
    for found in variants:
        ref = f"{found.family}:{found.seed}"
        if ref in done:
            continue
        options_ = options(backend, args, found.seed, teaching=False)
        started = time.perf_counter()
        outcome = Runtime(store, backend, found.task, options_, sessions_dir=work).run()
        row = {
            "point": point,
            "ref": ref,
            "family": found.family,
            "session": outcome.session_id,
            "seconds": round(time.perf_counter() - started, 1),
            **judge(store, outcome.session_id, found, options_.form),
        }
        kept.add(row)
        print(f"  {point} {json.dumps(row)}", flush=True)
    for ref, task in suite_tasks(args.suite):
        if ref in done:
            continue
        options_ = RunOptions.from_settings(
            Settings(), backend, approval="auto", max_ticks=args.suite_ticks, memory=False, seed=0
        )
        started = time.perf_counter()
        outcome = Runtime(store, backend, task, options_, sessions_dir=work).run()
        row = {
            "point": point,
            "ref": ref,
            "family": args.suite.partition(":")[0],
            "session": outcome.session_id,
            "seconds": round(time.perf_counter() - started, 1),
            "solved": session_solved(store, outcome.session_id),
        }
        kept.add(row)
        print(f"  {point} {json.dumps(row)}", flush=True)
    refs = {f"{v.family}:{v.seed}" for v in variants} | {ref for ref, _ in suite_tasks(args.suite)}
    rows = [row for ref, row in kept.measured(point).items() if ref in refs]
    return figures(rows, args.families)


def figures(rows: list[dict[str, Any]], taught_families: list[str]) -> dict[str, Any]:
    """Pass rates with 95% intervals, per family and over the taught ones, and the share of
    sessions whose blocks stand (where judged)."""
    by: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by.setdefault(row["family"], []).append(row)
    taught = [r for family, got in by.items() if family in taught_families for r in got]
    result: dict[str, Any] = {"seconds": round(sum(r.get("seconds", 0.0) for r in rows), 1)}
    for name, got in [("taught", taught), *sorted(by.items())]:
        n = len(got)
        passed = sum(r["solved"] for r in got)
        low, high = wilson(passed, n)
        result[name] = {
            "n": n,
            "pass_rate": round(passed / n, 3) if n else None,
            "ci95": [round(low, 3), round(high, 3)],
            **{
                f"{key}_valid": round(sum(r[key] for r in got) / n, 3)
                for key in ("action", "evaluation", "orientation")
                if n and all(key in r for r in got)
            },
        }
    return result


def teach(
    backend: Any,
    store: TraceStore,
    variants: list[Variant],
    args: argparse.Namespace,
    work: Path,
    kept: Kept,
) -> Tally:
    """Teaching sessions on `variants` (those kept already are not run again, unless
    their store was lost); the operator's actions in all of them."""
    stored = set(store.session_ids())
    done = {ref: session for ref, session in kept.taught().items() if session in stored}

    def runtime_for(found: Variant, operator: ScriptedOperator) -> Runtime:
        return Runtime(
            store,
            backend,
            found.task,
            options(backend, args, 1000 + found.seed, teaching=True),
            sessions_dir=work,
            asker=operator,
        )

    def solved(outcome: Outcome) -> bool:
        return session_solved(store, outcome.session_id)

    for i, found in enumerate(variants):
        ref = f"{found.family}:{found.seed}"
        if ref not in done:
            (session,) = teach_sessions([found], runtime_for, solved, offset=i).sessions
            kept.add({"taught": ref, "session": session})
            done[ref] = session
    return Tally.read(store, [done[f"{v.family}:{v.seed}"] for v in variants])


def teaching_only(store: TraceStore, sessions: list[int]) -> list[int]:
    """`sessions`, refused (HeldOutError) unless each ran a teaching variant."""
    names = [str(store.get_session(i).settings.get("task", {}).get("name")) for i in sessions]
    parsed = [parse_name(name) for name in names]
    if None in parsed:
        raise HeldOutError(f"not every session taught a family variant: {names}")
    check_teaching(v for v in parsed if v is not None)
    return sessions


def start_job(
    store: TraceStore,
    kind: JobKind,
    name: str,
    args: argparse.Namespace,
    work: Path,
    sessions: list[int],
) -> tuple[Job, bool]:
    """The job that trains adapter `name`, and whether it was under way already: one a
    stopped run left (resumed where it failed or was cancelled, followed where it runs),
    else a new one on the labels of `sessions`."""
    for job in store.list_jobs(limit=1_000_000):
        if job.name == name:
            if job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
                job = resume_job(store, job.id)
            return job, True
    options = JobOptions(
        kind=kind,
        base_model=str(args.model),
        name=name,
        epochs=args.epochs,
        learning_rate=args.lr.get(kind.value),
        max_length=args.max_length,
        save_steps=10_000,
        start_from=args.start_from.get(kind.value, "").replace("N", name.split("-", 1)[1]) or None,
        labels_from=str(args.teaching_from) if args.teaching_from else None,
        sessions=tuple(sessions),
        changed_only=args.changed_only,
        # the bench waits idle for the job, so it has every core (the console keeps one)
        cpu_threads=os.cpu_count(),
    )
    return queue_job(store, options, data_dir=work / "data"), False


def train(
    backend: Any,
    store: TraceStore,
    kind: JobKind,
    name: str,
    args: argparse.Namespace,
    work: Path,
    kept: Kept,
    sessions: list[int],
) -> dict[str, Any]:
    """Train with the product's job on the labels of `sessions` (teaching sessions only)
    and load the adapter; seconds from queueing to in use. An adapter kept is loaded."""
    row = kept.trained(name)
    if row is not None:
        check_training(work, name, row, args)
    again = row is not None and name not in {a.name for a in store.list_adapters()}
    if again:
        # rows restored without the store (bench/results, on another machine): the same
        # job again; the rows measured with the first adapter are kept
        print(f"  {name}: kept in rows.jsonl but not in the store: trained again", flush=True)
        row = None
    if row is None:
        import torch

        from agents.backends.transformers_backend import cpu_has_bf16

        started = time.perf_counter()
        job, resumed = start_job(store, kind, name, args, work, sessions)
        for _ in follow(store, job.id, poll=1.0):
            pass
        job = store.get_job(job.id)
        if job.status is not JobStatus.COMPLETED:
            raise SystemExit(f"training {name} ended {job.status.value}: {job.error}")
    adapter = store.get_adapter(name)
    backend.load_adapter(adapter.name, adapter.path)
    backend.use_adapter(adapter.name)
    if row is None:
        row = {
            "trained": name,
            "rows": job.config.get("rows_at_queue"),
            # to the adapter in use; a job a stopped run left has no time from the last label
            "label_to_adapter_s": None if resumed else round(time.perf_counter() - started, 1),
            "train_loss": adapter.metrics.get("train_loss"),
            "training": training_settings(args),
            **({"again": True} if again else {}),
            # the time is the machine's: training without native bf16 is several times slower
            "native_bf16": cpu_has_bf16(torch),
        }
        kept.add(row)
    return {k: v for k, v in row.items() if k not in ("trained", "training")}


#: What a kept row's meaning depends on: a run resumes only with these as they were
#: (`--held-out`, `--teach`, `--kinds` and `--suite` may change: they add or leave out).
SAME_RUN = (
    "model", "families", "untaught", "first", "candidates", "block_tokens", "attempts",
    "suite_ticks",
)  # fmt: skip
#: What an adapter depends on besides the run: kept with it. Other values train another
#: adapter in the same run, named with `--tag`; the base's rows are shared.
TRAINING = ("epochs", "lr", "max_length", "start_from", "changed_only", "teaching_from")


def same_run(work: Path, args: argparse.Namespace) -> None:
    """Keep the run's settings in `<work>/run.json`; stop, naming what differs, when the
    folder holds another run's."""
    mine = {key: str(getattr(args, key)) for key in SAME_RUN + TRAINING}
    path = work / "run.json"
    if path.exists():
        theirs = json.loads(path.read_text())
        differ = [k for k in SAME_RUN if theirs.get(k) != mine[k]]
        if differ:
            raise SystemExit(
                f"{work} holds another run (its {', '.join(differ)} differ): "
                "give another --work, or the same settings to resume it"
            )
    else:
        path.write_text(json.dumps(mine, indent=2) + "\n")


def training_settings(args: argparse.Namespace) -> dict[str, str]:
    """`TRAINING`'s values, and the digest of the teaching store an adapter was trained
    from (`--teaching-from`: the starter sessions, made again, keep their path)."""
    settings = {key: str(getattr(args, key)) for key in TRAINING}
    if args.teaching_from:
        digest = hashlib.sha256(Path(args.teaching_from).read_bytes()).hexdigest()
        settings["teaching_sha256"] = digest[:16]
    return settings


def check_training(work: Path, name: str, row: dict[str, Any], args: argparse.Namespace) -> None:
    """Stop, naming what differs, when adapter `name` was kept with other settings than
    these (an adapter kept before they were recorded has the run's first ones)."""
    had = row.get("training") or json.loads((work / "run.json").read_text())
    wanted = training_settings(args)
    differ = [k for k in wanted if k in had and had[k] != wanted[k]]
    if differ:
        was = ", ".join(f"{k} {had[k]}" for k in differ)
        raise SystemExit(f"{name} was trained with {was}: give --tag to train another beside it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", default=DEFAULT, help="an offline model's name, or a model's folder"
    )
    parser.add_argument("--families", default="fix_bug,compute,transform")
    parser.add_argument("--untaught", default=",".join(family_names(taught=False)))
    parser.add_argument("--teach", default="5,10,20", help="teaching sessions at each point")
    parser.add_argument("--held-out", type=int, default=10, help="held-out variants per family")
    parser.add_argument(
        "--first",
        type=int,
        default=6,
        help="the first held-out variant measured (those before it were looked at while "
        "the coder's prompts were written)",
    )
    parser.add_argument(
        "--suite", default="", help="a never-taught suite measured too (humaneval:held-out)"
    )
    parser.add_argument("--suite-ticks", type=int, default=3)
    parser.add_argument("--kinds", default="sft,dpo,kto", help="kinds trained at the last point")
    parser.add_argument("--candidates", type=int, help="(default: the model's)")
    parser.add_argument("--block-tokens", type=int, help="(default: the model's)")
    parser.add_argument("--attempts", type=int, default=1)
    parser.add_argument("--epochs", type=float, default=3.0)
    parser.add_argument("--lr", default="sft=2e-4,dpo=5e-5,kto=5e-5")
    parser.add_argument(
        "--start-from",
        default="dpo=sft-N,kto=sft-N",
        help="kind=adapter each kind starts from (N: the point); empty: from the base",
    )
    parser.add_argument("--max-length", type=int, default=3072)
    parser.add_argument(
        "--changed-only",
        action="store_true",
        help="train on the blocks the operator wrote only (adapters named sft-N-changed)",
    )
    parser.add_argument(
        "--tag",
        default="",
        help="added to the adapters' names (sft-N-TAG): other training settings in the "
        "same --work, beside the adapters kept there",
    )
    parser.add_argument("--base-only", action="store_true", help="measure the base, no teaching")
    parser.add_argument("--skip-base", action="store_true", help="teach and train only")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(".bench/learning-work"),
        help="the store, adapters and rows; the same folder again resumes a stopped run",
    )
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
    args.model = (
        Path(args.model) if Path(args.model).is_dir() else ensure_model(print, name=args.model)
    )
    points = [int(p) for p in args.teach.split(",")]
    kinds = [JobKind(k) for k in args.kinds.split(",")]
    families = args.families + [f for f in args.untaught.split(",") if f]
    seeds = range(args.first, args.first + args.held_out)
    measured = [variant(f, split(f)[1][i]) for i in seeds for f in families]

    from agents.backends.transformers_backend import TransformersBackend

    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "args": vars(args) | {}}
    results["args"]["model"] = f"{Path(args.model).name} (offline)"
    backend = TransformersBackend(str(args.model))
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    same_run(work, args)
    kept = Kept(work)
    store = TraceStore(work / "traces.db")
    if not args.skip_base:
        base = held_out(backend, store, measured, args, work / "base", kept, "base")
        results["base"] = base
        print(f"| base | 0 | {json.dumps(base)} |", flush=True)
    if args.base_only:
        points = []
    order = teaching_order(args.families, max(points, default=0))
    assert not {(v.family, v.seed) for v in order} & {(v.family, v.seed) for v in measured}
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
                tally = Tally.read(source, teaching_only(source, stored[:point]))
        else:
            tally = teach(backend, store, order[:point], args, work / "teach", kept)
            teaching_only(store, tally.sessions)
        # SFT at every point, first: the other kinds start from it (`--start-from`)
        last = [JobKind.SFT, *(k for k in kinds if k is not JobKind.SFT)]
        for kind in last if point == points[-1] else [JobKind.SFT]:
            name = f"{kind.value}-{point}" + ("-changed" if args.changed_only else "")
            name += f"-{args.tag}" if args.tag else ""
            sessions = stored[:point] if stored else tally.sessions
            trained = train(backend, store, kind, name, args, work, kept, sessions)
            after = held_out(backend, store, measured, args, work / name, kept, name)
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
