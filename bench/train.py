"""Training figures for docs/benchmarks.md: trl's defaults against the settings the job worker
picks (training/trainer.py `pick_settings`), SFT tokens/s and DPO pairs/s with peak GPU
memory; and the dataset build from a 100,000-node store (seconds, peak RSS).

Run on a GPU machine: `python bench/train.py` (0.5B- and 7B-shaped Qwen2 models, random
init, built from their config dicts: no downloads, and throughput does not depend on the
weights' values). `--quick` runs the same code on the CPU with the tests' tiny shape, as a
smoke test anywhere. Each configuration runs in its own process: Liger patches
transformers' model classes for the whole process, so configurations must not share one.

Both sides train the same LoRA (r64, all-linear, alpha 128) on the same synthetic agent
data: raw-text prompt/completion rows (the worker's form) of 1k-4k tokens for SFT at 4k
context, ~2k-token pairs for DPO. "defaults" is SFTConfig/DPOConfig as trl ships them
(bf16, gradient checkpointing, batch 8, no packing), with only the context length, the
LoRA and (7B) the batch of 2 that fits set; "auto" is what `pick_settings` chooses for
this GPU's free memory, passed as `trl_config_kwargs` and `model_kwargs`, as the worker
does. tokens/s counts real (non-padding) tokens, from trl's own `num_tokens` metric.

`--head-memory` runs only what trl's SFT step holds on the CPU by vocabulary and tokens
(its LM head is chunked: the logits are never whole).

Goal (issue 7): auto >= 2x defaults at both sizes, ahead of trl's best switches (0.5B:
19.6k tokens/s; 7B: 7.1k, measured on an H100).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: trl's default batch does not fit a 7B model at 4k: the anchors used 2.
DEFAULT_BATCH = {"0.5b": 8, "7b": 2, "tiny": 8}
LORA_R = 64


# -- one configuration, in its own process --------------------------------------------------------


def synthetic_rows(kind: str, count: int, max_length: int, vocab: int, seed: int = 0) -> list[dict]:
    """Agent-shaped rows as text of single-token words (`t<id>`): a long context and a
    short block for SFT (1/4 to all of `max_length`), a context and two blocks for DPO."""
    rng = random.Random(seed)

    def text(n: int) -> str:
        return " ".join(f"t{rng.randrange(4, vocab)}" for _ in range(n))

    rows = []
    for _ in range(count):
        if kind == "sft":
            total = rng.randint(max_length // 4, max_length - 2)
            completion = rng.randint(32, max(33, total // 8))
            rows.append({"prompt": text(total - completion), "completion": text(completion)})
        else:
            block = max_length // 8
            prompt = max_length - 2 * block - 2
            rows.append(
                {
                    "prompt": text(prompt),
                    "chosen": text(rng.randint(block // 2, block)),
                    "rejected": text(rng.randint(block // 2, block)),
                }
            )
    return rows


def word_tokenizer(vocab: int) -> Any:
    """A tokenizer whose every `t<id>` word is token <id>: exact lengths, no downloads."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<pad>": 0, "<eos>": 1, "<unk>": 2, "<bos>": 3}
    words.update({f"t{i}": i for i in range(4, vocab)})
    raw = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=raw, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def run_config(spec: dict[str, Any]) -> dict[str, Any]:
    """Train `spec["steps"]` optimizer steps; returns throughput and peak memory."""
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM, TrainerCallback
    from transformers.utils import logging as hf_logging

    from storage import JobKind
    from training.trainer import (
        QWEN2_SHAPES,
        ModelShape,
        detect_hardware,
        lora_config,
        model_kwargs,
        pick_settings,
        trl_config_kwargs,
    )

    hf_logging.set_verbosity_error()
    kind, shape_name, config_name = spec["kind"], spec["shape"], spec["config"]
    max_length = spec["max_length"]
    shape_dict = QWEN2_SHAPES[shape_name]
    hardware = detect_hardware()
    cpu = hardware.device != "cuda"
    started = time.perf_counter()

    if config_name == "auto":
        settings = pick_settings(
            kind,
            ModelShape.from_config(shape_dict),
            hardware,
            max_length=max_length,
            lora_r=LORA_R,
        )
        args = trl_config_kwargs(JobKind(kind), settings, max_length)
        loading = model_kwargs(settings)
        if settings.cpu_threads:
            torch.set_num_threads(settings.cpu_threads)
        described = settings.describe()
    else:  # trl's defaults, with the context length, the batch and (on a CPU) fp32 set
        args = {"max_length": max_length, "per_device_train_batch_size": DEFAULT_BATCH[shape_name]}
        if cpu:
            args.update(bf16=False, use_cpu=True)
        loading = {"dtype": torch.float32 if cpu else torch.bfloat16}
        if not cpu:
            loading["attn_implementation"] = "sdpa"
        described = f"trl defaults, batch {args['per_device_train_batch_size']}"
    accumulation = int(args.get("gradient_accumulation_steps", 1))
    batch = int(args["per_device_train_batch_size"]) * accumulation

    config = Qwen2Config(**shape_dict)
    dtype = loading.pop("dtype")
    attention = loading.pop("attn_implementation", None)
    if attention:
        config._attn_implementation = attention
    device = "cpu" if cpu else "cuda"
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    torch.set_default_dtype(previous)
    tokenizer = word_tokenizer(config.vocab_size)
    model.config.pad_token_id = tokenizer.pad_token_id
    model.config.eos_token_id = tokenizer.eos_token_id

    # Enough rows for every step however the batch is packed.
    count = max(64, batch * (spec["steps"] + spec["warmup"] + 2))
    rows = synthetic_rows(kind, count, max_length, config.vocab_size)
    dataset = Dataset.from_list(rows)
    stamps: dict[int, float] = {}  # optimizer step -> when it ended
    tokens: dict[int, float] = {}  # optimizer step -> trl's cumulative num_tokens

    class Clock(TrainerCallback):  # type: ignore[misc]
        def on_log(self, a: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "num_tokens" in logs:
                tokens[state.global_step] = float(logs["num_tokens"])

        def on_step_end(self, a: Any, state: Any, control: Any, **kw: Any) -> None:
            if device == "cuda":
                torch.cuda.synchronize()
            stamps[state.global_step] = time.perf_counter()

    common = {
        "output_dir": spec["out"],
        "max_steps": spec["steps"] + spec["warmup"],
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "dataset_num_proc": min(8, os.cpu_count() or 1),
        **args,
    }
    if kind == "sft":
        from trl import SFTConfig, SFTTrainer

        trainer = SFTTrainer(
            model=model,
            args=SFTConfig(**common),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora_config(LORA_R),
            callbacks=[Clock()],
        )
    else:
        from trl import DPOConfig, DPOTrainer

        trainer = DPOTrainer(
            model=model,
            args=DPOConfig(**common),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=lora_config(LORA_R),
            callbacks=[Clock()],
        )
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    first, last = spec["warmup"], max(stamps)
    elapsed = stamps[last] - stamps[first]
    counted = tokens.get(last, 0.0) - tokens.get(first, 0.0)
    steps = last - first
    return {
        **{k: spec[k] for k in ("kind", "shape", "config", "max_length")},
        "settings": described,
        "device": hardware.name or hardware.device,
        "steps": steps,
        "seconds": elapsed,
        "tokens_per_second": counted / elapsed if elapsed > 0 else None,
        "items_per_second": steps * batch / elapsed if elapsed > 0 else None,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        "wall_seconds": time.perf_counter() - started,
    }


def child(spec_json: str) -> int:
    spec = json.loads(spec_json)
    try:
        result = run_config(spec)
    except Exception as exc:  # an out-of-memory configuration is a result too
        result = {**spec, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def run_in_process(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timed out after {timeout:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line[len("RESULT ") :]))
    tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
    return {**spec, "error": f"exit {done.returncode}: {tail[:400]}"}


# -- the dataset build ------------------------------------------------------------------------------


def bench_dataset_build(
    nodes: int = 100_000, work: Path | None = None, *, per_session: int = 5_000
) -> list[str]:
    """Build a store of `nodes` nodes in sessions of `per_session` (tests/support/traces.py:
    runtime-shaped, labels and verdicts included), then, in a fresh process, write its SFT
    and DPO datasets: seconds and that process's peak RSS (the builder streams: memory
    must not grow with the store). Many sessions, as a real store holds: in one long
    session a single early bad label keeps everything under it out of SFT."""
    with tempfile.TemporaryDirectory(prefix="agent-console-bench-") as tmp:
        folder = work or Path(tmp)
        db = folder / "build.db"
        started = time.perf_counter()
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]);"
            "from storage import TraceStore; from tests.support.traces import build_session;"
            f"s = TraceStore(sys.argv[2]); n, per = {nodes}, {per_session}\n"
            "for i in range(0, n, per): build_session(s, blocks=min(per, n - i), seed=i)\n"
            "s.close()"
        )
        root = str(Path(__file__).resolve().parents[1])
        subprocess.run([sys.executable, "-c", code, root, str(db)], check=True)
        built = time.perf_counter() - started
        sessions = -(-nodes // per_session)
        lines = [f"dataset build: {nodes:,} nodes in {sessions} sessions, written in {built:.0f} s"]
        for kind in ("sft", "dpo"):
            done = subprocess.run(
                [sys.executable, __file__, "--dataset-child", kind, str(db), str(folder)],
                capture_output=True,
                text=True,
                check=True,
            )
            result = json.loads(done.stdout.strip().splitlines()[-1])
            lines.append(
                f"  {kind}: {result['rows']:>5} rows in {result['seconds']:.2f} s, "
                f"peak RSS {result['peak_mib']:.0f} MiB ({result['baseline_mib']:.0f} MiB "
                f"after imports); {result['summary']}"
            )
        return lines


def dataset_child(kind: str, db: str, folder: str) -> int:
    from storage import TraceStore
    from training.datasets import write_jsonl

    with TraceStore(db) as store:
        store.count_nodes(1)  # connections and schema checks are not the build
        baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        started = time.perf_counter()
        report = write_jsonl(store, kind, Path(folder) / f"{kind}.jsonl")
        seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    summary = {
        "rows": report.rows,
        "seconds": seconds,
        "peak_mib": peak,
        "baseline_mib": baseline,
        "summary": report.describe(),
    }
    print(json.dumps(summary))
    return 0


# -- the LM head's memory ----------------------------------------------------------------------------


def bench_head_memory() -> list[str]:
    """What trl's SFT step (the GPU path's trainer: its own chunked LM head, no completion
    loss of ours) holds beyond the model on the CPU, for a 2-layer Qwen2 of hidden size 64
    with a 32k and a 152k vocabulary at 2k and 8k tokens a step, each in its own process:
    were the logits materialized, 8k tokens of the 152k vocabulary would hold 10 GB more."""
    lines = []
    for vocab in (32_000, 151_936):
        for tokens in (2048, 8192):
            done = subprocess.run(
                [sys.executable, __file__, "--head-child", str(vocab), str(tokens)],
                capture_output=True,
                text=True,
                env=dict(os.environ, TOKENIZERS_PARALLELISM="false"),
            )
            found = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
            if not found:
                tail = " | ".join(done.stderr.strip().splitlines()[-2:])
                lines.append(f"head memory, vocab {vocab}, {tokens} tokens: failed: {tail[:300]}")
                continue
            got = json.loads(found[-1])
            lines.append(
                f"head memory, vocab {vocab:,}, {tokens:,} tokens a step: "
                f"{got['step_mib']:,.0f} MiB over the loaded model"
            )
    return lines


def head_child(vocab: int, tokens: int) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    import torch
    from datasets import Dataset
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging
    from trl import SFTConfig, SFTTrainer

    from training.trainer import lora_config

    hf_logging.set_verbosity_error()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    config = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=vocab,
        max_position_embeddings=2 * tokens,
    )
    model = Qwen2ForCausalLM(config)
    tokenizer = word_tokenizer(vocab)
    model.config.pad_token_id = tokenizer.pad_token_id
    rng = random.Random(0)

    def text(n: int) -> str:
        return " ".join(f"t{rng.randrange(4, vocab)}" for _ in range(n))

    rows = [{"prompt": text(tokens - 40), "completion": text(30)} for _ in range(4)]
    with tempfile.TemporaryDirectory(prefix="agent-console-head-") as out:
        args = SFTConfig(
            output_dir=out,
            max_steps=2,
            per_device_train_batch_size=1,
            max_length=tokens,
            use_cpu=True,
            bf16=False,
            report_to="none",
            save_strategy="no",
            disable_tqdm=True,
            gradient_checkpointing=False,
            dataset_num_proc=None,
        )
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=lora_config(8),
        )
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        trainer.train()
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"vocab": vocab, "tokens": tokens, "step_mib": (after - before) / 1024}))
    return 0


# -- the report -------------------------------------------------------------------------------------


def format_result(result: dict[str, Any]) -> str:
    name = f"{result['kind']} {result['shape']:>4} {result['config']:<8}"
    if "error" in result:
        return f"{name} FAILED: {result['error']}"
    peak = f"{result['peak_gib']:5.1f} GiB" if result.get("peak_gib") is not None else "    -    "
    if result["kind"] == "sft":
        rate = f"{result['tokens_per_second']:>9,.0f} tokens/s"
    else:
        rate = f"{result['items_per_second']:>9.2f} pairs/s "
    return f"{name} {rate}  peak {peak}  ({result['settings']})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--dataset-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--head-child", nargs=2, type=int, help=argparse.SUPPRESS)
    parser.add_argument(
        "--head-memory",
        action="store_true",
        help="only what trl's SFT step holds on the CPU by vocabulary and tokens",
    )
    parser.add_argument("--quick", action="store_true", help="CPU, tiny shape: a smoke test")
    parser.add_argument("--shapes", default=None, help="comma-separated: 0.5b,7b (default)")
    parser.add_argument("--kinds", default="sft,dpo")
    parser.add_argument("--configs", default="defaults,auto")
    parser.add_argument("--steps", type=int, default=None, help="timed optimizer steps")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first")
    parser.add_argument("--nodes", type=int, default=None, help="dataset build size (100000)")
    parser.add_argument("--skip-training", action="store_true")
    parser.add_argument("--skip-dataset", action="store_true")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--timeout", type=float, default=1500, help="seconds per configuration")
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child)
    if args.dataset_child:
        return dataset_child(*args.dataset_child)
    if args.head_child:
        return head_child(*args.head_child)
    if args.head_memory:
        for line in bench_head_memory():
            print(line, flush=True)
        return 0

    shapes = (args.shapes or ("tiny" if args.quick else "0.5b,7b")).split(",")
    steps = args.steps or (4 if args.quick else 8)
    warmup = args.warmup or (2 if args.quick else 3)
    results = []
    with tempfile.TemporaryDirectory(prefix="agent-console-bench-") as tmp:
        if not args.skip_training:
            for shape in shapes:
                for kind in args.kinds.split(","):
                    for config in args.configs.split(","):
                        spec = {
                            "kind": kind,
                            "shape": shape,
                            "config": config,
                            "max_length": (256 if args.quick else 4096)
                            if kind == "sft"
                            else (256 if args.quick else 2048),
                            "steps": steps,
                            "warmup": warmup,
                            "out": str(Path(tmp) / f"{kind}-{shape}-{config}"),
                        }
                        result = run_in_process(spec, args.timeout)
                        results.append(result)
                        print(format_result(result), flush=True)
                    pair = {r["config"]: r for r in results[-2:] if "error" not in r}
                    if {"defaults", "auto"} <= set(pair):
                        key = "tokens_per_second" if kind == "sft" else "items_per_second"
                        ratio = pair["auto"][key] / pair["defaults"][key]
                        print(f"{kind} {shape:>4} auto / defaults: {ratio:.2f}x", flush=True)
        if not args.skip_dataset:
            nodes = args.nodes or (5_000 if args.quick else 100_000)
            for line in bench_dataset_build(nodes, Path(tmp)):
                print(line, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
