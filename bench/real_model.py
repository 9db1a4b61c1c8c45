"""The real model (Gemma 3 270M base, offline) on this machine: how fast, and what it writes.

Run: `.venv/bin/python bench/real_model.py [speed] [quality] [--sessions N] [--vllm URL]`.
Time it on a quiet machine: one other busy process makes two-thread torch erratic.

- speed: the prompt of a session's first orientation (the genesis, the example tick, the
  task reminder: about 1.5k tokens) through the in-process backend in float32 and in
  bfloat16, medians of 3 runs each: time to the first token, decode rate with 1, 4 and 8
  candidates (128 tokens each, no stop), a ranked block of 8 candidates x 256 tokens (an
  action under its grammar, stopped at the end marker, then scored); whether the yes/no
  scores of both dtypes agree; with `--vllm URL`, the same rates from a vLLM server
  serving the converted folder (agent-console serve).
- quality: headless sessions of one tick on each shipped task with the product's CPU
  defaults, with and without the example tick and the grammar (4 configurations), and the
  tests' random model for reference (`--attempts N`: tries an action gets a tick, the
  product's 3 by default): per block kind, the share of chosen blocks that are
  valid (not empty, not cut off, not a copy; code parses and registers what its kind must),
  sessions solved, seconds per block and per tick.

Figures go to stdout as Markdown rows and to .bench/real_model.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents import blocks, ranking
from agents.backends.offline import ensure_model
from agents.events import BlockSampled, RuntimeEvent
from agents.grammar import block_grammar
from agents.runtime import RunOptions, Runtime
from agents.tasks import load_task
from storage import Author, NodeStatus, TraceStore

TASKS = ("fix_failing_test", "csv_summary", "vigenere")
OUT = Path(__file__).resolve().parents[1] / ".bench" / "real_model.json"


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def orientation_prompt(backend: Any, task_name: str = "csv_summary") -> str:
    """The exact prompt of a session's first orientation, built by a real runtime that
    stops right before sampling it."""

    class Stop(Exception):
        pass

    class Capture:
        def __init__(self) -> None:
            self.prompt = ""

        def __getattr__(self, name: str) -> Any:
            return getattr(backend, name)

        def generate(self, prompt: str, **_: Any) -> Any:
            self.prompt = prompt
            raise Stop

    capture = Capture()
    with tempfile.TemporaryDirectory() as tmp, TraceStore(Path(tmp) / "t.db") as store:
        options = RunOptions(example=True, constrain=True, approval="deny", max_ticks=1)
        runtime = Runtime(
            store, capture, load_task(task_name), options, sessions_dir=Path(tmp) / "s"
        )  # type: ignore[arg-type]
        with contextlib.suppress(Stop):
            runtime.run()
    return capture.prompt


def speed(model: Path, vllm: str | None) -> dict[str, Any]:
    from agents.backends.transformers_backend import TransformersBackend

    results: dict[str, Any] = {}
    scores: dict[str, list[float]] = {}
    for dtype in ("float32", "bfloat16"):
        # the same prompt again and again: each encoded whole, as a new block's would be
        backend = TransformersBackend(str(model), dtype=dtype, keep_prompt=False)
        prompt = orientation_prompt(backend)
        prompt_tokens = len(backend.tokenize(prompt))
        row: dict[str, Any] = {"prompt_tokens": prompt_tokens}
        backend.generate(prompt, n=1, max_tokens=4, temperature=0.8, seed=0)  # warm up
        firsts, rates = [], {1: [], 4: [], 8: []}
        for run in range(3):
            for n in (1, 4, 8):
                started = time.perf_counter()
                first: list[float] = []

                def seen(_row: int, _piece: str, first: list[float] = first) -> None:
                    if not first:
                        first.append(time.perf_counter())

                out = backend.generate(
                    prompt, n=n, max_tokens=128, temperature=0.8, seed=run, on_token=seen
                )
                seconds = time.perf_counter() - started
                tokens = sum(len(c.token_ids) for c in out)
                rates[n].append(tokens / seconds)
                if n == 8:
                    firsts.append(first[0] - started)
        row["first_token_s"] = median(firsts)
        row["tokens_per_s"] = {n: median(v) for n, v in rates.items()}
        # a ranked action block: 8 x 256 under the grammar, stopped at the end marker, scored
        header = "#startblock type: action\n#index 4\n#timestamp 1767225628.0\n\n"
        block_prompt = prompt.rsplit("#startblock type: orientation", 1)[0] + header
        block_times, useful = [], []
        for run in range(3):
            started = time.perf_counter()
            out = backend.generate(
                block_prompt,
                n=8,
                max_tokens=256,
                stop=blocks.STOP,
                temperature=0.75,
                seed=run,
                grammar=block_grammar(blocks.ACTION, 256),
            )
            question = blocks.QUESTIONS[blocks.ACTION]
            backend.score_yes_no(
                [ranking.question_prompt(block_prompt, c.text, question) for c in out]
            )
            block_times.append(time.perf_counter() - started)
            useful.append(sum(len(c.token_ids) for c in out) / (8 * 256))
        row["ranked_block_8x256_s"] = median(block_times)
        row["useful_token_share"] = median(useful)
        question = ranking.question_prompt(
            prompt, "# I read the task and the file list first.", blocks.QUESTIONS["orientation"]
        )
        scores[dtype] = backend.score_yes_no([question, ranking.CALIBRATION + "#q: Is 2 odd?"])
        backend.close()
        results[dtype] = row
        print(f"| {dtype} | {json.dumps(row)} |", flush=True)
    results["score_difference"] = max(
        abs(a - b) for a, b in zip(scores["float32"], scores["bfloat16"], strict=True)
    )
    if vllm:
        results["vllm"] = vllm_speed(vllm, model)
    return results


def vllm_speed(url: str, model: Path) -> dict[str, Any]:
    from agents.backends.openai_backend import OpenAIBackend
    from agents.backends.transformers_backend import TransformersBackend

    local = TransformersBackend(str(model))
    prompt = orientation_prompt(local)
    local.close()
    server = OpenAIBackend(url, "", timeout=600)
    server.generate(prompt, n=1, max_tokens=4, temperature=0.8)
    row: dict[str, Any] = {}
    for n in (1, 4, 8):
        rates, firsts = [], []
        for run in range(3):
            started = time.perf_counter()
            out = server.generate(prompt, n=n, max_tokens=128, temperature=0.8, seed=run)
            seconds = time.perf_counter() - started
            rates.append(sum(len(c.token_ids) for c in out) / seconds)
            if n == 1:
                started = time.perf_counter()
                server.generate(prompt, n=1, max_tokens=1, temperature=0.8, seed=run)
                firsts.append(time.perf_counter() - started)
        row[f"tokens_per_s_{n}"] = median(rates)
        if firsts:
            row["first_token_s"] = median(firsts)
    server.close()
    print(f"| vllm | {json.dumps(row)} |", flush=True)
    return row


def valid(node: Any) -> bool:
    """A chosen block that can stand: text, not cut off, not a copy; code that parses and
    registers what its kind must register."""
    if not node.text.strip() or node.truncated or node.meta.get("copy"):
        return False
    if node.kind in blocks.CODE_KINDS:
        if blocks.parse_error(node.text) is not None:
            return False
        method = ranking.REQUIRED_CALL.get(node.kind)
        if method and not blocks.registered_titles(node.text, method):
            return False
    return True


def quality(
    model: Path,
    sessions: int,
    ticks: int,
    only: list[str],
    tasks: list[str],
    random: bool,
    attempts: int = 3,
) -> dict[str, Any]:
    from agents.backends.transformers_backend import TransformersBackend
    from tests.support.tiny_model import build_tiny_model

    configs = {
        "bare": {"example": False, "constrain": False},
        "example": {"example": True, "constrain": False},
        "grammar": {"example": False, "constrain": True},
        "example+grammar": {"example": True, "constrain": True},
    }
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tiny = build_tiny_model(Path(tmp) / "tiny", norm_scale=8.0)
        runs = [("gemma", name, config) for name, config in configs.items() if name in only]
        if random:
            runs.append(("random", "example+grammar", configs["example+grammar"]))
        for model_name, name, config in runs:
            backend = TransformersBackend(str(model if model_name == "gemma" else tiny))
            options = RunOptions.from_settings(
                _settings(),
                backend,
                approval="auto",
                max_ticks=ticks,
                memory=False,
                attempts=attempts,
                **config,
            )
            folder = Path(tmp) / f"{model_name}-{name}"
            row = run_sessions(backend, options, sessions, tasks, folder)
            backend.close()
            results[f"{model_name} {name}"] = row
            print(f"| {model_name} | {name} | {json.dumps(row)} |", flush=True)
    return results


def _settings() -> Any:
    from agents.settings import Settings

    return Settings()


def run_sessions(
    backend: Any, options: RunOptions, sessions: int, tasks: list[str], folder: Path
) -> dict[str, Any]:
    folder.mkdir(parents=True)
    kinds: dict[str, list[bool]] = defaultdict(list)
    per_task: dict[str, list[bool]] = defaultdict(list)
    block_seconds: dict[str, list[float]] = defaultdict(list)
    tick_seconds: list[float] = []
    solved = copies = cut_off = no_repeat = 0
    with TraceStore(folder / "t.db") as store:
        for number in range(sessions):
            for task_name in tasks:
                timeline: list[tuple[float, RuntimeEvent]] = []

                def listen(
                    event: RuntimeEvent, timeline: list[tuple[float, RuntimeEvent]] = timeline
                ) -> None:
                    timeline.append((time.perf_counter(), event))

                started = time.perf_counter()
                runtime = Runtime(
                    store,
                    backend,
                    load_task(task_name),
                    RunOptions(**{**options.snapshot(), "seed": number}),
                    sessions_dir=folder / "sessions",
                    listener=listen,
                )
                outcome = runtime.run()
                tick_seconds.append((time.perf_counter() - started) / max(1, outcome.ticks))
                solved += outcome.status.value == "completed"
                for _, event in timeline:
                    if isinstance(event, BlockSampled):
                        block_seconds[event.block].append(event.seconds)
                for node in store.tree(outcome.session_id):
                    if node.author is Author.MODEL and node.status is not NodeStatus.ALTERNATE:
                        ok = valid(node)
                        copies += bool(node.meta.get("copy"))
                        cut_off += node.truncated
                        no_repeat += "no_repeat" in node.sampling
                        kinds[node.kind].append(ok)
                        if node.kind in (blocks.ACTION, blocks.EVALUATION):
                            per_task[f"{task_name} {node.kind}"].append(ok)
    return {
        "sessions": sessions * len(tasks),
        "solved": solved,
        "valid": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(kinds.items())},
        "valid_by_task": {k: f"{sum(v)}/{len(v)}" for k, v in sorted(per_task.items())},
        "copies_chosen": copies,
        "cut_off_chosen": cut_off,
        "chosen_from_no_repeat_round": no_repeat,
        "block_s": {k: round(median(v), 1) for k, v in sorted(block_seconds.items())},
        "tick_s": round(median(tick_seconds), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("parts", nargs="*", default=["speed", "quality"])
    parser.add_argument("--sessions", type=int, default=1, help="sessions per task and setting")
    parser.add_argument("--ticks", type=int, default=1)
    parser.add_argument("--vllm", help="an OpenAI-compatible server serving the model")
    parser.add_argument(
        "--configs",
        default="bare,example,grammar,example+grammar",
        help="which helps to compare (comma-separated)",
    )
    parser.add_argument("--tasks", default=",".join(TASKS), help="shipped tasks to run")
    parser.add_argument("--no-random", action="store_true", help="skip the random model")
    parser.add_argument("--attempts", type=int, default=3, help="tries an action gets a tick")
    args = parser.parse_args()
    model = ensure_model(print)
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d")}
    if "speed" in args.parts:
        results["speed"] = speed(model, args.vllm)
    if "quality" in args.parts:
        results["quality"] = quality(
            model,
            args.sessions,
            args.ticks,
            args.configs.split(","),
            args.tasks.split(","),
            not args.no_random,
            args.attempts,
        )
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(f"written to {OUT}")


if __name__ == "__main__":
    main()
