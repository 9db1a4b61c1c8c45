"""Model-backend figures for docs/benchmarks.md, measured against real servers and models.

Run: `.venv/bin/python bench/backends.py` (needs `.venv-vllm`: `make vllm`). It builds the
tests' tiny model (random-init Qwen2, `tests/support/tiny_model.py`), starts its own vLLM
server on it (`tests/backends/vllm_server.py`, the same flags the tests use), runs every
section in `SECTIONS` and stops the server.

Sections:
- generation: 16 candidates x 64 new tokens from a ~30M-parameter model, vLLM server vs
  the transformers backend, tokens/s. Goal: vLLM >= 2x.
- scoring: the logit evaluator's pattern: 16 candidate blocks after one shared context,
  each asked the same yes/no question. One batched `score_yes_no` call against 16 calls
  of one prompt each. Goal from the backends issue: batched >= 4x faster. Every repetition
  uses fresh candidates, so neither side is served from the other's prefix cache.

A new section is a function taking the `BenchContext` and returning its report lines,
appended to `SECTIONS`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.backends.base import Backend
from agents.backends.openai_backend import OpenAIBackend
from tests.backends.vllm_server import (
    SERVED_NAME,
    VLLMServer,
    running_vllm_server,
    vllm_missing_reason,
    vllm_python,
)
from tests.support.tiny_model import build_tiny_model

QUESTION = "\n#q: Is this action likely to make progress on the task?"
_VOCABULARY = (
    "the agent reads notes file result check value list open close write line test task "
    "progress expected observation action evaluation return print import path data"
)
WORDS = _VOCABULARY.split()


@dataclass
class BenchContext:
    """What every section gets: the tiny model, the server on it, a client, the options."""

    args: argparse.Namespace
    model_dir: Path
    server: VLLMServer
    backend: OpenAIBackend


def _context_text(rng: random.Random, words: int) -> str:
    """A trace-like shared context of about `words` words."""
    lines = ["#startblock type: orientation"]
    while sum(len(line.split()) for line in lines) < words:
        lines.append(" ".join(rng.choice(WORDS) for _ in range(12)))
    lines.append("#endblock\n")
    return "\n".join(lines)


def _candidates(rng: random.Random, context: str, count: int, tag: str) -> list[str]:
    """`count` prompts: the context, a different action block each, the question."""
    prompts = []
    for i in range(count):
        body = " ".join(rng.choice(WORDS) for _ in range(24))
        prompts.append(
            f"{context}#startblock type: action\ndef action_{tag}_{i}(subagent):\n"
            f"    # {body}\n    return subagent.check({i})\n#endblock{QUESTION}"
        )
    return prompts


def scoring_section(ctx: BenchContext) -> list[str]:
    """One batched score_yes_no over 16 candidates vs 16 sequential single calls."""
    backend, count, reps = ctx.backend, ctx.args.candidates, ctx.args.repeats
    rng = random.Random(0)
    lines = [f"scoring {count} candidates (vLLM server, tiny model, medians of {reps})"]
    for words in ctx.args.context_words:
        context = _context_text(rng, words)
        tokens = len(backend.tokenize(_candidates(rng, context, 1, "probe")[0]))
        # Warm both paths (first-use compilation, the yes/no token lookup).
        backend.score_yes_no(_candidates(rng, context, count, "warm"))
        for prompt in _candidates(rng, context, count, "warm1"):
            backend.score_yes_no([prompt])
        batched, sequential = [], []
        for rep in range(reps):
            prompts = _candidates(rng, context, count, f"b{rep}")
            start = time.perf_counter()
            backend.score_yes_no(prompts)
            batched.append(time.perf_counter() - start)
            prompts = _candidates(rng, context, count, f"s{rep}")
            start = time.perf_counter()
            for prompt in prompts:
                backend.score_yes_no([prompt])
            sequential.append(time.perf_counter() - start)
        one, each = statistics.median(batched), statistics.median(sequential)
        lines.append(
            f"  prompts of ~{tokens} tokens: batched {one * 1000:7.1f} ms, "
            f"sequential {each * 1000:7.1f} ms, ratio {each / one:4.1f}x (goal >= 4x)"
        )
    return lines


def generation_section(ctx: BenchContext) -> list[str]:
    """16 candidates x 64 new tokens from a ~30M-parameter random-init Qwen2: the vLLM
    server against the in-process transformers backend, in generated tokens per second.
    The model gets its own server (16 sequences at a time, so n=16 runs as one batch)."""
    from agents.backends.transformers_backend import TransformersBackend

    n, new_tokens, reps = 16, 64, 3
    model_dir = build_tiny_model(
        ctx.model_dir.parent / "model-30m", hidden=512, layers=8, heads=8, seed=3
    )
    params = _parameters(model_dir)
    prompt = _context_text(random.Random(5), 40) + "#startblock type: action\ndef action("

    def rate(backend: Backend) -> float:
        backend.generate(prompt, n=n, max_tokens=new_tokens, temperature=1.0, seed=0)  # warm
        times, tokens = [], []
        for rep in range(reps):
            start = time.perf_counter()
            out = backend.generate(prompt, n=n, max_tokens=new_tokens, temperature=1.0, seed=rep)
            times.append(time.perf_counter() - start)
            tokens.append(sum(len(c.token_ids) for c in out))
        return sum(tokens) / sum(times)

    local = TransformersBackend(str(model_dir), keep_prompt=False)  # each prompt encoded whole
    try:
        hf_rate = rate(local)
    finally:
        local.close()
    extra = ("--max-num-seqs", "16")
    with running_vllm_server(
        model_dir, ctx.server.log_path.parent / "30m", extra_args=extra
    ) as server:
        remote = OpenAIBackend(server.base_url, SERVED_NAME)
        try:
            vllm_rate = rate(remote)
        finally:
            remote.close()
    return [
        f"generation, {n} candidates x {new_tokens} new tokens, {params / 1e6:.0f}M-parameter "
        f"model on CPU (sum over {reps} runs):",
        f"  vLLM server {vllm_rate:7.0f} tokens/s, transformers in process {hf_rate:7.0f} "
        f"tokens/s, ratio {vllm_rate / hf_rate:4.1f}x (goal >= 2x)",
    ]


def _parameters(model_dir: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(model_dir / "model.safetensors"), "pt") as weights:
        return sum(_numel(weights, key) for key in weights.keys())  # noqa: SIM118


def _numel(weights: object, key: str) -> int:
    shape = weights.get_slice(key).get_shape()  # type: ignore[attr-defined]
    total = 1
    for size in shape:
        total *= size
    return total


#: Report sections, run in order against one server. Add new ones here.
SECTIONS: list[Callable[[BenchContext], list[str]]] = [scoring_section, generation_section]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument(
        "--context-words",
        type=int,
        nargs="+",
        default=[0, 120, 300],
        help="shared-context sizes to measure (words; the server's context is 512 tokens)",
    )
    args = parser.parse_args()
    if vllm_python() is None:
        print(f"bench/backends.py: {vllm_missing_reason()}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="agent-console-bench-") as tmp:
        work = Path(tmp)
        started = time.perf_counter()
        model_dir = build_tiny_model(work / "model")
        with running_vllm_server(model_dir, work / "vllm") as server:
            print(f"tiny model built and vLLM server up in {time.perf_counter() - started:.0f} s")
            backend = OpenAIBackend(server.base_url, SERVED_NAME)
            try:
                ctx = BenchContext(args=args, model_dir=model_dir, server=server, backend=backend)
                for section in SECTIONS:
                    print("\n".join(section(ctx)), flush=True)
            finally:
                backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
