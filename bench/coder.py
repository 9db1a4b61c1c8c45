"""What an offline model does through the agent on held-out variants of the task families,
with a model's registry defaults beside the options the agent had before them.

Run: `.venv/bin/python bench/coder.py [--models qwen2.5-coder-0.5b,gemma-3-270m]
[--configs defaults,document] [--held-out 2] [--ticks 3] [--work .bench/coder]`.

- `defaults`: the options the product chooses for the model on this machine
  (`auto_defaults`: for an instruction-tuned coder, chat prompts and script blocks).
- `document`: the options before the registry said anything: the raw document, callback
  blocks, the example tick, the grammar, 8 candidates of 256 tokens.

Every session is `--approval auto`, at most `--ticks` ticks, on `--held-out` held-out
seeds of each family (`agents.tasks.families.split`, never a teaching seed), from the
`--first`-th on (those before it were looked at while the prompts were written: they are
not measured). `--teaching` runs teaching variants instead, to try prompts on. Per model
and options: sessions solved (every task check passes) with a 95% Wilson interval, chosen
actions that ran without error, chosen orientations that name the task's own files, and
the median tick's seconds. The stores are kept under `--work`, one per model and options;
a variant with a finished session there is not run again, so a stopped run resumes.
Figures go to stdout as Markdown rows and to `<work>/coder.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import blocks
from agents.backends.offline import ensure_model
from agents.batch import wilson
from agents.runtime import RunOptions, Runtime, session_solved
from agents.settings import Settings
from agents.tasks.families import Variant, family_names, split, variant
from storage import NodeStatus, SessionStatus, TraceStore
from training.teach import names_the_task

DOCUMENT = {
    "prompt": "document",
    "form": "callback",
    "example": True,
    "constrain": True,
    "candidates": 8,
    "block_tokens": 256,
    "escalation": (),
}
CONFIGS: dict[str, dict[str, Any]] = {"defaults": {}, "document": DOCUMENT}


def held_out(count: int, first: int = 0, teaching_set: bool = False) -> list[Variant]:
    """`count` held-out variants of each family, from the `first`-th held-out seed on
    (`teaching_set`: teaching variants instead, to try prompts on; never a figure)."""
    out = []
    for family in family_names():
        teaching, seeds = split(family)
        if teaching_set:
            out += [variant(family, seed) for seed in teaching[first : first + count]]
            continue
        chosen = seeds[first : first + count]
        assert not set(chosen) & set(teaching), "a held-out seed is a teaching seed"
        out += [variant(family, seed) for seed in chosen]
    return out


def judge(store: TraceStore, session_id: int, found: Variant) -> dict[str, Any]:
    tree = store.tree(session_id)
    actions = [
        n
        for n in tree
        if n.kind == blocks.ACTION and n.status in (NodeStatus.EXECUTED, NodeStatus.FAILED)
    ]
    orientations = [
        n for n in tree if n.kind == blocks.ORIENTATION and n.status is NodeStatus.CHOSEN
    ]
    ticks = max((n.tick for n in tree), default=0)
    return {
        "variant": found.task.name,
        "family": found.family,
        "solved": session_solved(store, session_id),
        "ticks": ticks,
        "actions_ran": sum(n.status is NodeStatus.EXECUTED for n in actions),
        "actions": len(actions),
        "orientations_named": sum(names_the_task(n.text, found) for n in orientations),
        "orientations": len(orientations),
    }


def rate(part: int, whole: int) -> str:
    if not whole:
        return "-"
    low, high = wilson(part, whole)
    return f"{part}/{whole} ({100 * part / whole:.0f}%, {100 * low:.0f}-{100 * high:.0f})"


def run(model_name: str, config: str, variants: list[Variant], args: argparse.Namespace) -> dict:
    from agents.backends.transformers_backend import TransformersBackend

    folder = args.work / f"{model_name}-{config}"
    folder.mkdir(parents=True, exist_ok=True)
    backend = TransformersBackend(str(ensure_model(print, name=model_name)))
    rows: list[dict[str, Any]] = []
    tick_seconds: list[float] = []
    try:
        with TraceStore(folder / "traces.db") as store:
            # a variant's finished session from an earlier run (a stopped run resumes)
            done = {
                s.settings.get("task", {}).get("name"): s.id
                for s in store.list_sessions()
                if s.status is not SessionStatus.RUNNING
            }
            for found in variants:
                session_id = done.get(found.task.name)
                if session_id is None:
                    options = RunOptions.from_settings(
                        Settings(),
                        backend,
                        approval="auto",
                        max_ticks=args.ticks,
                        memory=False,
                        seed=found.seed,
                        **CONFIGS[config],
                    )
                    started = time.perf_counter()
                    outcome = runtime_for(store, backend, found, options, folder).run()
                    tick_seconds.append((time.perf_counter() - started) / max(1, outcome.ticks))
                    session_id = outcome.session_id
                row = judge(store, session_id, found)
                rows.append(row)
                print(f"  {model_name} {config} {json.dumps(row)}", flush=True)
    finally:
        backend.close()
    total = {
        "sessions": len(rows),
        "solved": rate(sum(r["solved"] for r in rows), len(rows)),
        "solved_in_1_tick": rate(sum(r["solved"] and r["ticks"] == 1 for r in rows), len(rows)),
        "actions_ran": rate(sum(r["actions_ran"] for r in rows), sum(r["actions"] for r in rows)),
        "orientations_named": rate(
            sum(r["orientations_named"] for r in rows), sum(r["orientations"] for r in rows)
        ),
        "tick_s": round(statistics.median(tick_seconds), 1) if tick_seconds else None,
        "by_family": {
            f: rate(
                sum(r["solved"] for r in rows if r["family"] == f),
                sum(r["family"] == f for r in rows),
            )
            for f in family_names()
        },
        "rows": rows,
    }
    return total


def runtime_for(
    store: TraceStore, backend: Any, found: Variant, options: RunOptions, folder: Path
) -> Runtime:
    return Runtime(store, backend, found.task, options, sessions_dir=folder / "sessions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="qwen2.5-coder-0.5b,gemma-3-270m")
    parser.add_argument("--configs", default="defaults,document")
    parser.add_argument("--held-out", type=int, default=2, help="held-out variants per family")
    parser.add_argument(
        "--first", type=int, default=4, help="skip this many held-out seeds of each family"
    )
    parser.add_argument("--ticks", type=int, default=3)
    parser.add_argument(
        "--teaching", action="store_true", help="teaching variants, to try prompts on"
    )
    parser.add_argument("--work", type=Path, default=Path(".bench/coder"))
    args = parser.parse_args()
    variants = held_out(args.held_out, args.first, args.teaching)
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "ticks": args.ticks}
    for model_name in args.models.split(","):
        for config in args.configs.split(","):
            row = run(model_name, config, variants, args)
            results[f"{model_name} {config}"] = row
            brief = {k: v for k, v in row.items() if k != "rows"}
            print(f"| {model_name} | {config} | {json.dumps(brief)} |", flush=True)
            args.work.mkdir(parents=True, exist_ok=True)
            (args.work / "coder.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
