"""What keeping the last block prompt's cache saves on a real tick: the same tick of the
default model with `keep_prompt` on and off, alternating, in one process.

Run: `.venv/bin/python bench/prompt_cache.py [--runs 2] [--candidates 1]` on a quiet
machine. Each run is one tick of a teaching variant (`family:compute:0`, approval auto,
memory off, seed 0, the product's defaults but `--candidates`). Reported per setting: the
tick's seconds (median), the tokens the model encoded before sampling or scoring against
the tokens of those prompts, and whether the chosen blocks were the same text both ways
(the encodings differ in rounding only).

Figures go to stdout and to `.bench/prompt_cache.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.backends.offline import ensure_model
from agents.backends.transformers_backend import TransformersBackend
from agents.runtime import Runtime, session_options
from agents.settings import Settings
from agents.tasks.families import load_family_task
from storage import Author, NodeStatus, TraceStore

OUT = Path(__file__).resolve().parents[1] / ".bench" / "prompt_cache.json"
TASK = "family:compute:0"


def one_tick(backend: TransformersBackend, candidates: int, encoded: list[int]) -> dict[str, Any]:
    """One tick: its seconds, the tokens encoded ahead of sampling or scoring (the
    longest forward passes: prefills), and the chosen model blocks' text."""
    task = load_family_task(TASK)
    options = session_options(
        Settings(), backend, task, approval="auto", memory=False, max_ticks=1, seed=0,
        candidates=candidates,
    )  # fmt: skip
    encoded.clear()
    with tempfile.TemporaryDirectory() as folder, TraceStore(Path(folder) / "t.db") as store:
        started = time.perf_counter()
        runtime = Runtime(store, backend, task, options, sessions_dir=Path(folder) / "s")
        runtime.run()
        seconds = time.perf_counter() - started
        session = store.list_sessions()[0]
        chosen = [
            n.text
            for n in store.tree(session.id)
            if n.author is Author.MODEL and n.status is not NodeStatus.ALTERNATE
        ]
    # a decoding step encodes one token a row; anything longer is a prompt being encoded
    return {"s": seconds, "encoded": sum(n for n in encoded if n > 1), "chosen": chosen}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--candidates", type=int, default=1)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    args = parser.parse_args()
    backend = TransformersBackend(str(ensure_model(print, name=args.model)))
    encoded: list[int] = []
    embed = backend._base.get_input_embeddings()
    embed.register_forward_pre_hook(lambda _m, inputs: encoded.append(inputs[0].shape[-1]))
    runs: dict[str, list[dict[str, Any]]] = {"kept": [], "whole": []}
    for run in range(args.runs):
        for setting in ("whole", "kept") if run % 2 else ("kept", "whole"):
            backend.keep_prompt = setting == "kept"
            backend._prompt_cache = None
            row = one_tick(backend, args.candidates, encoded)
            runs[setting].append(row)
            print(f"run {run} {setting}: {row['s']:.1f} s, {row['encoded']} tokens encoded")
    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "task": TASK,
        "candidates": args.candidates,
        "runs": args.runs,
        "dtype": str(backend._dtype),
    }
    for setting, rows in runs.items():
        report[setting] = {
            "tick_s_median": round(statistics.median(r["s"] for r in rows), 1),
            "tick_s": [round(r["s"], 1) for r in rows],
            "encoded_tokens": [r["encoded"] for r in rows],
        }
    report["same_chosen_blocks"] = [
        kept["chosen"] == whole["chosen"]
        for kept, whole in zip(runs["kept"], runs["whole"], strict=True)
    ]
    report["speedup"] = round(report["whole"]["tick_s_median"] / report["kept"]["tick_s_median"], 2)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
