"""How fast the default model is on this machine, in process and through a vLLM CPU server,
and which gives a newcomer's first tick sooner.

Run: `.venv/bin/python bench/coder_speed.py [--runs 3] [--model qwen2.5-coder-0.5b]`
on a quiet machine (one other busy process makes two-thread torch erratic). Needs
`.venv-vllm` (`make vllm`).

- In process (the product's transformers backend, bf16 where the CPU has it): seconds to
  load, time to the first token of a session's first orientation (its real chat prompt),
  then tokens/s with 1, 4 and 8 candidates of 128 tokens (no stop), medians of `--runs`.
- Server: `vllm serve` of the converted folder in bfloat16 (the flags `agent-console serve`
  gives), seconds until it answers, then the same figures through the OpenAI backend.
- First tick: one tick of a teaching variant (`family:compute:0`, approval auto, the
  product's defaults for each backend) from nothing: the load or the server's start
  included. The console's default on a CPU is whichever is sooner.

Figures go to stdout and to `.bench/coder_speed.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.backends.offline import ensure_model
from agents.runtime import Runtime, session_options
from agents.settings import Settings
from agents.tasks.families import load_family_task
from storage import TraceStore

OUT = Path(__file__).resolve().parents[1] / ".bench" / "coder_speed.json"
TASK = "family:compute:0"


def first_prompt(backend: Any) -> str:
    """The exact prompt of a session's first orientation with `backend`'s defaults."""

    class Stop(Exception):
        pass

    class Capture:
        prompt = ""

        def __getattr__(self, name: str) -> Any:
            return getattr(backend, name)

        def generate(self, prompt: str, **_: Any) -> Any:
            Capture.prompt = prompt
            raise Stop

    with tempfile.TemporaryDirectory() as tmp, TraceStore(Path(tmp) / "t.db") as store:
        task = load_family_task(TASK)
        options = session_options(Settings(), backend, task, approval="deny", memory=False)
        runtime = Runtime(store, Capture(), task, options, sessions_dir=Path(tmp) / "s")  # type: ignore[arg-type]
        with contextlib.suppress(Stop):
            runtime.run()
    return Capture.prompt


def rates(backend: Any, runs: int) -> dict[str, Any]:
    if hasattr(backend, "keep_prompt"):
        backend.keep_prompt = False  # the same prompt each run: encode it whole each time
    prompt = first_prompt(backend)
    backend.generate(prompt, n=1, max_tokens=4, temperature=0.8)  # warm
    row: dict[str, Any] = {"prompt_tokens": len(backend.tokenize(prompt))}
    firsts = []
    for run in range(runs):
        started = time.perf_counter()
        backend.generate(prompt, n=1, max_tokens=1, temperature=0.8, seed=run)
        firsts.append(time.perf_counter() - started)
    row["first_token_s"] = round(statistics.median(firsts), 2)
    for n in (1, 4, 8):
        measured = []
        for run in range(runs):
            started = time.perf_counter()
            out = backend.generate(prompt, n=n, max_tokens=128, temperature=0.8, seed=run)
            seconds = time.perf_counter() - started
            measured.append(sum(len(c.token_ids) for c in out) / seconds)
        row[f"tokens_per_s_{n}"] = round(statistics.median(measured), 1)
    return row


def one_tick(backend: Any, folder: Path) -> float:
    task = load_family_task(TASK)
    options = session_options(
        Settings(), backend, task, approval="auto", memory=False, max_ticks=1, seed=0
    )
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with TraceStore(folder / "t.db") as store:
        Runtime(store, backend, task, options, sessions_dir=folder / "s").run()
    return time.perf_counter() - started


def measure(backend: Any, ready: float, folder: Path, runs: int) -> dict[str, Any]:
    """A backend that took `ready` seconds to load or answer: its first tick from nothing,
    then its rates."""
    tick = one_tick(backend, folder)
    return {
        "ready_s": round(ready, 1),
        "first_tick_from_nothing_s": round(ready + tick, 1),
        **rates(backend, runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    args = parser.parse_args()
    from agents.backends.openai_backend import OpenAIBackend
    from agents.backends.transformers_backend import TransformersBackend
    from tests.backends.vllm_server import running_vllm_server

    folder = ensure_model(print, name=args.model)
    results: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "model": args.model}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        local = TransformersBackend(str(folder))
        loaded = time.perf_counter() - started
        results["in_process"] = measure(local, loaded, work / "local-tick", args.runs)
        local.close()
        print(json.dumps({"in_process": results["in_process"]}), flush=True)

        started = time.perf_counter()
        with running_vllm_server(
            folder,
            work / "vllm",
            max_model_len=4096,
            served_name=args.model,
            extra_args=["--dtype", "bfloat16"],
            startup_timeout=600.0,
        ) as server:
            ready = time.perf_counter() - started
            remote = OpenAIBackend(server.base_url, args.model, timeout=600)
            results["server"] = measure(remote, ready, work / "server-tick", args.runs)
            remote.close()
        print(json.dumps({"server": results["server"]}), flush=True)
    local_tick = results["in_process"]["first_tick_from_nothing_s"]
    server_tick = results["server"]["first_tick_from_nothing_s"]
    results["sooner_first_tick"] = "in process" if local_tick <= server_tick else "server"
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
