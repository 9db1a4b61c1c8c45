"""The trl side of a training job: pick the settings for the hardware, load the base model
with a LoRA config, run SFTTrainer or DPOTrainer with a callback that reports to the store,
and publish the adapter.

Imported by the worker process (training/worker.py) and bench/train.py only; torch,
transformers, peft, trl and datasets load inside the functions that need them, so
`pick_settings` is testable (and the bench's parent process runs) without them.

How settings are picked (`pick_settings`), from the model's shape and the device:
- CPU (or Apple MPS): float32, no gradient checkpointing, no packing: small models only;
  bf16 base weights where the CPU multiplies bf16 natively and the model is big enough for
  it to pay (the backend's rule). On a CPU only the positions the loss is on go through
  the LM head: SFT's loss (`completion_loss`), DPO's and KTO's log-probabilities
  (`compact_fused_head`).
- CUDA: bf16 (fp16 where the GPU has no bf16); SFT packs sequences (trl's best-fit
  packing, which is padding-free: no compute spent on padding); Liger kernels when
  `liger_kernel` is importable; gradient checkpointing only when the batch does not fit
  in free memory without it: first the micro-batch shrinks (gradient accumulation keeps
  the effective batch), and only a single sequence that does not fit turns it on.
  Checkpointing costs about a third more compute, so it is the last resort, not trl's
  default.
- QLoRA (4-bit base weights, bitsandbytes) only when asked and installed, on CUDA.
- More than one GPU: one process per GPU under `accelerate launch` (the worker does that).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.backends.transformers_backend import BF16_CPU_MIN_PARAMETERS, cpu_has_bf16
from storage import JobKind, JobStatus, NotFoundError
from training.jobs import (
    ADAPTER_MARKER,
    CHECKPOINT_PREFIX,
    DATASET_NAME,
    JobOptions,
    adapter_path,
    checkpoint_step,
    checkpoints_dir,
    job_dir,
    last_checkpoint,
)

if TYPE_CHECKING:
    from storage import Job, TraceStore

GIB = 1024**3
#: The share of free GPU memory a configuration may plan to use (fragmentation, the
#: CUDA context, allocator slack take the rest).
MEMORY_BUDGET = 0.88
#: Fixed allowance for the CUDA context, cuBLAS workspaces and the allocator.
MEMORY_OVERHEAD = int(1.5 * GIB)
#: The effective batch (sequences, or pairs for DPO) per optimizer step: trl's default.
EFFECTIVE_BATCH = 8
DATASET_REPORT = "dataset.json"
SFT_COLUMNS = ("prompt", "completion")
DPO_COLUMNS = ("prompt", "chosen", "rejected")
KTO_COLUMNS = ("prompt", "completion", "label")


class TrainingError(Exception):
    """A job that cannot run as asked; `str()` is one line for the job's error field."""


# -- the model's shape and the machine ------------------------------------------------------------

#: Qwen2 configs of real sizes, for random-init benchmarks and for planning tests (no
#: weights needed: speed and memory depend on the shape only).
QWEN2_SHAPES: dict[str, dict[str, Any]] = {
    "0.5b": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
    },
    "7b": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "rope_theta": 1000000.0,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 32768,
    },
    # the tests' tiny model (tests/support/tiny_model.py): for --quick on a CPU
    "tiny": {
        "hidden_size": 128,
        "intermediate_size": 384,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 3000,
        "tie_word_embeddings": True,
        "max_position_embeddings": 8192,
    },
}


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What memory and speed depend on, read from a model's config."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    vocab_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    tied_embeddings: bool = True

    @classmethod
    def from_config(cls, config: Mapping[str, Any] | Any) -> ModelShape:
        """From a config dict (config.json) or a transformers config object."""

        def get(key: str, default: Any = None) -> Any:
            if isinstance(config, Mapping):
                return config.get(key, default)
            return getattr(config, key, default)

        text = get("text_config", None)
        if text is not None and get("hidden_size", None) is None:
            return cls.from_config(text)
        hidden = int(get("hidden_size", 0) or 0)
        heads = int(get("num_attention_heads", 0) or 1)
        if hidden <= 0:
            raise TrainingError("the base model's config has no hidden_size: not a causal LM?")
        return cls(
            hidden_size=hidden,
            intermediate_size=int(get("intermediate_size", 0) or 4 * hidden),
            num_layers=int(get("num_hidden_layers", 0) or 1),
            vocab_size=int(get("vocab_size", 0) or 32_000),
            num_heads=heads,
            num_kv_heads=int(get("num_key_value_heads", 0) or heads),
            head_dim=int(get("head_dim", 0) or hidden // heads),
            tied_embeddings=bool(get("tie_word_embeddings", False)),
        )

    @property
    def kv_size(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def parameters(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        q_o = 2 * h * self.num_heads * self.head_dim
        attention = q_o + 2 * h * self.kv_size + self.num_heads * self.head_dim + 2 * self.kv_size
        layer = attention + 3 * h * i + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tied_embeddings else 2)
        return self.num_layers * layer + embeddings + h

    def lora_parameters(self, rank: int) -> int:
        """LoRA on every linear layer of every block (peft's `all-linear`)."""
        h, i, q = self.hidden_size, self.intermediate_size, self.num_heads * self.head_dim
        per_layer = (h + q) * 2 + (h + self.kv_size) * 2 + (h + i) * 3
        return rank * per_layer * self.num_layers


@dataclass(frozen=True, slots=True)
class Hardware:
    device: str  # "cuda", "mps" or "cpu"
    gpu_count: int = 0
    #: bytes free on the GPU with the least free (each process gets one GPU)
    free_memory: int = 0
    total_memory: int = 0
    bf16: bool = False
    liger: bool = False
    bitsandbytes: bool = False
    name: str = ""
    #: CPU cores this process may run on
    cpu_count: int = 1

    @classmethod
    def cpu(cls, cores: int = 1) -> Hardware:
        return cls(device="cpu", cpu_count=cores)


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def detect_hardware() -> Hardware:
    """The device this process would train on, and what is installed for it."""
    import importlib.util

    import torch

    liger = importlib.util.find_spec("liger_kernel") is not None
    bnb = importlib.util.find_spec("bitsandbytes") is not None
    cores = usable_cores()
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        free = []
        total = []
        for index in range(count):
            got_free, got_total = torch.cuda.mem_get_info(index)
            free.append(int(got_free))
            total.append(int(got_total))
        return Hardware(
            device="cuda",
            gpu_count=count,
            free_memory=min(free),
            total_memory=min(total),
            bf16=bool(torch.cuda.is_bf16_supported()),
            liger=liger,
            bitsandbytes=bnb,
            name=torch.cuda.get_device_name(0),
            cpu_count=cores,
        )
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return Hardware(device="mps", cpu_count=cores)
    return Hardware(
        device="cpu", bf16=cpu_has_bf16(torch), liger=liger, bitsandbytes=bnb, cpu_count=cores
    )


# -- the settings ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TrainSettings:
    device: str
    dtype: str  # the weights' dtype: "float32", "bfloat16" or "float16"
    bf16: bool
    fp16: bool
    gradient_checkpointing: bool
    packing: bool
    liger: bool
    per_device_batch_size: int
    gradient_accumulation_steps: int
    quantize_4bit: bool
    processes: int
    #: torch's intra-op threads on a CPU (None: torch's default)
    cpu_threads: int | None = None
    estimated_peak_bytes: int | None = None
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        parts = [
            self.device if self.processes == 1 else f"{self.processes}x {self.device}",
            self.dtype,
            f"batch {self.per_device_batch_size}x{self.gradient_accumulation_steps}",
            "packing" if self.packing else "no packing",
            "gradient checkpointing" if self.gradient_checkpointing else "no checkpointing",
        ]
        if self.cpu_threads:
            parts.append(f"{self.cpu_threads} thread{'s' if self.cpu_threads > 1 else ''}")
        if self.liger:
            parts.append("Liger kernels")
        if self.quantize_4bit:
            parts.append("4-bit base (QLoRA)")
        if self.estimated_peak_bytes:
            parts.append(f"~{self.estimated_peak_bytes / GIB:.1f} GiB planned")
        return ", ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["notes"] = list(self.notes)
        return values


def estimate_peak_bytes(
    shape: ModelShape,
    *,
    tokens: int,
    lora_r: int,
    checkpointing: bool,
    quantized: bool = False,
    liger: bool = False,
    reference_pass: bool = False,
) -> int:
    """Planned peak GPU memory for one micro-batch of `tokens` tokens in bf16.

    Activations per token and layer are (20 h + 6.5 i) bytes with Liger's fused norms and
    SwiGLU (calibrated on trl 1.16's measured 63.7 GiB peak for a 7B Qwen2 shape at
    2 x 4096 tokens, LoRA r64, without checkpointing), (26 h + 9 i) without. With checkpointing only each
    layer's input stays (2 h bytes) plus one layer's worth being recomputed. trl 1.16
    computes the LM head's loss in chunks, so logits cost a bounded slice."""
    h, i = shape.hidden_size, shape.intermediate_size
    weights = shape.parameters * (0.56 if quantized else 2.0)
    lora = shape.lora_parameters(lora_r) * 16  # fp32 weight, grad, two Adam moments
    per_token_layer = int(20 * h + 6.5 * i) if liger else (26 * h + 9 * i)
    if checkpointing:
        activations = tokens * (2 * h * shape.num_layers + per_token_layer)
    else:
        activations = tokens * per_token_layer * shape.num_layers
    logits = min(tokens, 4096) * shape.vocab_size * 6
    reference = tokens * (per_token_layer + 2 * h) if reference_pass else 0
    return int(weights + lora + activations + logits + reference + MEMORY_OVERHEAD)


def pick_settings(
    kind: JobKind | str,
    shape: ModelShape,
    hardware: Hardware,
    *,
    max_length: int,
    lora_r: int,
    qlora: bool = False,
    batch_size: int | None = None,
) -> TrainSettings:
    """The fastest configuration that fits: see the module docstring. TrainingError when
    the request cannot run here (QLoRA without CUDA or bitsandbytes)."""
    kind = JobKind(kind)
    notes: list[str] = []
    if qlora and hardware.device != "cuda":
        raise TrainingError("--qlora needs a CUDA GPU (bitsandbytes' 4-bit kernels); none found")
    if qlora and not hardware.bitsandbytes:
        raise TrainingError(
            "--qlora needs bitsandbytes: pip install 'agent-console[gpu]' (or bitsandbytes)"
        )
    if hardware.device != "cuda":
        size = batch_size or (4 if kind is JobKind.SFT else 2)
        # Native bf16 matmuls (AVX512-BF16, AMX): bf16 base weights, float32 LoRA weights
        # (peft keeps adapters in float32): 4x the tokens/s of float32 on Gemma 3 270M.
        # Below the backend's size for bf16 it does not pay, and the tests' tiny models keep
        # their float32 runs. (trl's bf16 flag alone, autocast, did not apply on a CPU: the
        # steps ran at float32 speed.)
        native = (
            hardware.device == "cpu"
            and hardware.bf16
            and shape.parameters >= BF16_CPU_MIN_PARAMETERS
        )
        notes.append(
            f"{hardware.device}: "
            + ("bf16 weights (native bf16), float32 LoRA" if native else "float32")
            + ", no checkpointing (small models only)"
        )
        # One core stays free: OpenMP threads spin while they wait, so a trainer using
        # every core slows to a crawl (measured: 9x) beside anything else that runs.
        threads = max(1, hardware.cpu_count - 1)
        return TrainSettings(
            device=hardware.device,
            dtype="bfloat16" if native else "float32",
            bf16=native,
            fp16=False,
            gradient_checkpointing=False,
            packing=False,
            liger=False,
            per_device_batch_size=size,
            # The batch asked for is the batch: on a CPU the data sets are small, and
            # accumulating would leave a handful of examples a step or two per epoch.
            gradient_accumulation_steps=1,
            quantize_4bit=False,
            processes=1,
            cpu_threads=threads,
            notes=tuple(notes),
        )

    dtype = "bfloat16" if hardware.bf16 else "float16"
    if not hardware.bf16:
        notes.append("no bf16 on this GPU: fp16 mixed precision")
    packing = kind is JobKind.SFT
    liger = hardware.liger
    # A DPO step runs chosen and rejected together: two sequences per pair, plus the
    # reference pass (the base, adapter off) without gradients.
    # KTO runs each example beside a mismatched one for its KL estimate, likewise.
    sequences_per_item = 1 if kind is JobKind.SFT else 2
    budget = int(hardware.free_memory * MEMORY_BUDGET)

    def peak(items: int, checkpointing: bool) -> int:
        return estimate_peak_bytes(
            shape,
            tokens=items * sequences_per_item * max_length,
            lora_r=lora_r,
            checkpointing=checkpointing,
            quantized=qlora,
            liger=liger,
            reference_pass=kind is not JobKind.SFT,
        )

    sizes = [batch_size] if batch_size else [8, 4, 2, 1]
    chosen: tuple[int, bool] | None = None
    for checkpointing in (False, True):
        for size in sizes:
            if peak(size, checkpointing) <= budget:
                chosen = (size, checkpointing)
                break
        if chosen:
            break
    if chosen is None:
        chosen = (sizes[-1], True)
        notes.append(
            f"even one {'pair' if kind is JobKind.DPO else 'sequence'} of {max_length} tokens "
            f"may not fit in {hardware.free_memory / GIB:.1f} GiB free: lower --max-length"
            + ("" if qlora else " or try --qlora")
        )
    size, checkpointing = chosen
    if checkpointing:
        notes.append("gradient checkpointing: the batch does not fit without it")
    accumulation = max(1, EFFECTIVE_BATCH // (size * max(1, hardware.gpu_count)))
    return TrainSettings(
        device="cuda",
        dtype=dtype,
        bf16=hardware.bf16,
        fp16=not hardware.bf16,
        gradient_checkpointing=checkpointing,
        packing=packing,
        liger=liger,
        per_device_batch_size=size,
        gradient_accumulation_steps=accumulation,
        quantize_4bit=qlora,
        processes=max(1, hardware.gpu_count),
        estimated_peak_bytes=peak(size, checkpointing),
        notes=tuple(notes),
    )


def trl_config_kwargs(kind: JobKind, settings: TrainSettings, max_length: int) -> dict[str, Any]:
    """The SFTConfig / DPOConfig arguments that `settings` stand for (the bench passes
    the same ones)."""
    values: dict[str, Any] = {
        "bf16": settings.bf16,
        "fp16": settings.fp16,
        "gradient_checkpointing": settings.gradient_checkpointing,
        "per_device_train_batch_size": settings.per_device_batch_size,
        "gradient_accumulation_steps": settings.gradient_accumulation_steps,
        "max_length": max_length,
        "use_cpu": settings.device == "cpu",
    }
    if settings.gradient_checkpointing:
        values["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
    if settings.liger:
        values["use_liger_kernel"] = True
    if kind is JobKind.SFT and settings.packing:
        values["packing"] = True
        values["packing_strategy"] = "bfd"  # best-fit, padding-free
    return values


def model_kwargs(settings: TrainSettings) -> dict[str, Any]:
    """`from_pretrained` arguments for `settings` (torch imported here)."""
    import torch

    values: dict[str, Any] = {"dtype": getattr(torch, settings.dtype)}
    if settings.device == "cuda":
        values["attn_implementation"] = "sdpa"
    if settings.quantize_4bit:
        from transformers import BitsAndBytesConfig

        values["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=getattr(torch, settings.dtype),
        )
        values["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    return values


def _completion_logits(forward: Any, labels: Any, **inputs: Any) -> tuple[Any, Any, Any]:
    """The float32 logits at the positions whose next-token label is not -100, found with
    `logits_to_keep` so the rest never go through the LM head, and those labels:
    (logits [batch, kept, vocab], labels [batch, kept], the kept positions [kept])."""
    targets = labels[:, 1:]
    keep = (targets != -100).any(dim=0).nonzero().squeeze(-1)
    outputs = forward(**inputs, logits_to_keep=keep, use_cache=False)
    return outputs.logits.float(), targets[:, keep], keep


def completion_loss(model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> Any:
    """SFT's loss (mean negative log-likelihood of the completion tokens) with the LM head
    applied only at the positions the loss is on. trl's fused head tiles the whole
    sequence in float32 on a CPU, which took two thirds of a Gemma step (a 262k-token
    vocabulary); here the head runs on the completion's few hundred positions."""
    import torch

    logits, picked, _ = _completion_logits(
        model,
        inputs["labels"],
        input_ids=inputs["input_ids"],
        attention_mask=inputs.get("attention_mask"),
    )
    total = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), picked.reshape(-1), ignore_index=-100, reduction="sum"
    )
    count = (picked != -100).sum() if num_items_in_batch is None else num_items_in_batch
    return total / torch.as_tensor(count).clamp(min=1)


def compact_fused_head(model: Any) -> None:
    """On a CPU, make the fused LM head that trl's DPO and KTO trainers add to `model` (its
    `model(..., labels=..., fused_lm_head=True)` gives per-token log-probabilities) project
    only the positions with a label, as it does on a GPU. On a CPU trl projects every
    position of the sequence, the prompt's two thousand included. Call it after the
    trainer is made, on the model trl patched (the base model under the adapter)."""
    import types

    import torch
    from trl.trainer.utils import FusedCausalLMOutput

    fused = model.forward
    original = types.MethodType(type(model).forward, model)

    def forward(
        self: Any,
        *args: Any,
        fused_lm_head: bool = False,
        labels: Any = None,
        shift_labels: Any = None,
        num_items_in_batch: Any = None,
        **kwargs: Any,
    ) -> Any:
        if (
            args
            or not fused_lm_head
            or labels is None
            or shift_labels is not None
            or kwargs.get("output_router_logits")
        ):
            return fused(
                *args,
                fused_lm_head=fused_lm_head,
                labels=labels,
                shift_labels=shift_labels,
                num_items_in_batch=num_items_in_batch,
                **kwargs,
            )
        kwargs.pop("use_cache", None)
        logits, picked, keep = _completion_logits(original, labels, **kwargs)
        mask = labels[:, 1:] != -100
        log_softmax = torch.log_softmax(logits, dim=-1)
        target = picked.clamp(min=0).unsqueeze(-1)

        def spread(values: Any) -> Any:
            return values.new_zeros(mask.shape).index_copy(1, keep, values).masked_fill(~mask, 0)

        log_probs = spread(log_softmax.gather(-1, target).squeeze(-1))
        with torch.no_grad():
            entropy = spread(-(log_softmax.exp() * log_softmax).sum(-1))
            mean_logits = spread(logits.mean(-1))
            is_top1 = spread((logits.argmax(-1, keepdim=True) == target).squeeze(-1).float()).bool()
            log_sum_sq_probs = spread(torch.logsumexp(2 * log_softmax, dim=-1))
        count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(
            loss=-log_probs.sum() / count,
            log_probs=log_probs,
            entropy=entropy,
            log_sum_sq_probs=log_sum_sq_probs,
            mean_logits=mean_logits,
            is_top1=is_top1,
            label_mask=mask,
        )

    model.forward = types.MethodType(forward, model)


def _completion_compute_loss(
    self: Any,
    model: Any,
    inputs: dict[str, Any],
    return_outputs: bool = False,
    num_items_in_batch: Any = None,
) -> Any:
    """`compute_loss` for an SFT trainer on a CPU (see `completion_loss`); it counts the
    tokens trained on as trl does (the progress events' tokens/s)."""
    loss = completion_loss(model, inputs, num_items_in_batch)
    if model.training:
        mask = inputs.get("attention_mask")
        seen = int(mask.sum()) if mask is not None else int(inputs["input_ids"].numel())
        self._total_train_tokens += seen
        self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
    return (loss, None) if return_outputs else loss


def lora_config(rank: int) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,  # dropout copies every adapted layer's input: memory, no gain here
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )


# -- the dataset ------------------------------------------------------------------------------


def dataset_path(job: Job) -> Path:
    return job_dir(job) / DATASET_NAME


def build_dataset(store: TraceStore, job: Job, log: Callable[[str], None]) -> dict[str, Any]:
    """The job's rows, built once: a resumed job trains on the rows it started with.
    Returns the build report (rows, sessions, mismatches)."""
    from training.datasets import write_jsonl

    path = dataset_path(job)
    report_file = job_dir(job) / DATASET_REPORT
    if path.is_file() and report_file.is_file():
        report = json.loads(report_file.read_text(encoding="utf-8"))
        log(f"dataset: reusing {path} ({report['rows']} rows)")
        return dict(report)
    options = JobOptions.from_config(job.config)
    if job.config.get("labels_db"):
        from storage import TraceStore

        log(f"dataset: the labels of {options.labels_from}")
        with TraceStore(job.config["labels_db"]) as source:
            built = write_jsonl(
                source,
                options.kind.value,
                path,
                since=options.since,
                session_ids=options.sessions,
            )
    else:
        built = write_jsonl(
            store, options.kind.value, path, since=options.since, session_ids=options.sessions
        )
    report = {
        "path": str(path),
        "kind": options.kind.value,
        "rows": int(built.rows),
        "sessions": int(built.sessions),
        "mismatches": len(built.mismatches),
        "since": options.since,
        "summary": built.describe(),
    }
    for mismatch in list(built.mismatches)[:20]:
        log(f"dataset: left out {mismatch}")
    log(f"dataset: {built.describe()}")
    if report["rows"] == 0:
        raise TrainingError(
            f"the labels make no usable {options.kind.value} rows: {built.describe()}"
        )
    tmp = report_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(report, indent=2), encoding="utf-8")
    os.replace(tmp, report_file)
    return report


def load_rows(path: Path, kind: JobKind, cache_dir: Path) -> Any:
    """The JSONL as a `datasets.Dataset` with only the columns trl trains on: raw-text
    prompt/completion (prompt/chosen/rejected), trl's standard non-conversational form,
    so the loss falls on the completion only."""
    import datasets

    datasets.disable_progress_bars()
    rows = datasets.load_dataset(
        "json", data_files=str(path), split="train", cache_dir=str(cache_dir)
    )
    columns = {JobKind.SFT: SFT_COLUMNS, JobKind.DPO: DPO_COLUMNS, JobKind.KTO: KTO_COLUMNS}[kind]
    missing = [c for c in columns if c not in rows.column_names]
    if missing:
        raise TrainingError(f"{path}: rows lack {', '.join(missing)}")
    return rows.select_columns(list(columns))


def fit_prompts(rows: Any, tokenizer: Any, max_length: int) -> tuple[Any, int]:
    """Rows whose prompt and longest completion fit in `max_length` tokens: a longer
    prompt keeps its end (the block's own header and the context nearest it). trl cuts
    from the end (`keep_start`, its only mode), which would cut the completion, the part
    the loss is on. Returns the rows and how many prompts were cut."""
    completions = [c for c in ("completion", "chosen", "rejected") if c in rows.column_names]

    def length(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    def fit(row: dict[str, Any]) -> dict[str, Any]:
        # two special tokens (BOS, EOS) beside the text; at least a few tokens of prompt
        budget = max_length - 2 - max(length(row[c]) for c in completions)
        ids = tokenizer(row["prompt"], add_special_tokens=False)["input_ids"]
        if len(ids) <= budget:
            return {"prompt": row["prompt"], "cut": False}
        return {"prompt": tokenizer.decode(ids[-max(budget, 16) :]), "cut": True}

    fitted = rows.map(fit)
    cut = sum(fitted["cut"])
    return fitted.remove_columns(["cut"]), cut


# -- reporting to the store ---------------------------------------------------------------------


class Reporter:
    """What the job says to the store, and to its log (stdout: worker.log). Only the main
    process of a multi-GPU run writes to the store; every process logs."""

    def __init__(self, store: TraceStore, job_id: int, *, main: bool = True) -> None:
        self.store = store
        self.job_id = job_id
        self.main = main

    def log(self, message: str, **data: Any) -> None:
        print(message, flush=True)
        if self.main:
            self.store.add_job_event(self.job_id, "log", message=message, data=data or None)

    def event(
        self, kind: str, *, message: str | None = None, step: int | None = None, **data: Any
    ) -> None:
        if message:
            print(f"{kind}: {message}", flush=True)
        if self.main:
            self.store.add_job_event(
                self.job_id, kind, message=message, step=step, data=data or None
            )

    def update(self, **changes: Any) -> None:
        if self.main:
            self.store.update_job(self.job_id, **changes)


def cancel_requested(store: TraceStore, job_id: int, baseline_event: int) -> bool:
    """Status `cancelling`, or a `cancel` event written since this worker started (a
    cancel that raced the worker's own `running`)."""
    job = store.get_job(job_id)
    if job.status is JobStatus.CANCELLING:
        return True
    return bool(store.job_events(job_id, after_id=baseline_event, kind="cancel", limit=1))


def _make_callback(
    reporter: Reporter,
    *,
    baseline_event: int,
    poll_seconds: float,
    world_size: int,
) -> Any:
    from transformers import TrainerCallback

    class JobCallback(TrainerCallback):  # type: ignore[misc]
        """Progress to the store at each logging step; a checkpoint event at each save;
        and every `poll_seconds` a look for a cancel request, which saves and stops."""

        def __init__(self) -> None:
            self.cancelled = False
            self.started = time.monotonic()
            self.start_step = 0
            self.last_poll = 0.0
            self.last_tokens: tuple[float, float] | None = None  # (time, num_tokens)
            self.latest: dict[str, Any] = {}
            self.summary: dict[str, Any] = {}

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.started = time.monotonic()
            self.start_step = state.global_step
            if state.global_step:
                reporter.log(f"resumed at step {state.global_step} of {state.max_steps}")
            else:
                reporter.log(f"training: {state.max_steps} steps")

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            now = time.monotonic()
            stop = False
            if reporter.main and now - self.last_poll >= poll_seconds:
                self.last_poll = now
                stop = cancel_requested(reporter.store, reporter.job_id, baseline_event)
            if world_size > 1:
                stop = _broadcast_flag(stop, args)
            if stop and not self.cancelled:
                self.cancelled = True
                control.should_save = True
                control.should_training_stop = True
                print(
                    f"cancel requested: saving a checkpoint at step {state.global_step}", flush=True
                )

        def on_log(
            self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any
        ) -> None:
            logs = dict(logs or {})
            if "train_runtime" in logs or "train_loss" in logs:
                self.summary = {k: v for k, v in logs.items() if isinstance(v, int | float)}
                return
            if "loss" not in logs:
                return
            now = time.monotonic()
            step, total = int(state.global_step), int(state.max_steps or 0)
            done = step - self.start_step
            eta = (now - self.started) / done * (total - step) if done > 0 and total else None
            rate = None
            tokens = logs.get("num_tokens")
            if isinstance(tokens, int | float):
                # The first rate counts from the start (a resumed run's count may not).
                first = (self.started, 0.0 if self.start_step == 0 else None)
                since, before = self.last_tokens or first
                if before is not None and now > since:
                    rate = (tokens - before) / (now - since)
                self.last_tokens = (now, float(tokens))
            data = {
                "step": step,
                "total_steps": total,
                "loss": _number(logs.get("loss")),
                "learning_rate": _number(logs.get("learning_rate")),
                "tokens_per_second": rate,
                "eta_seconds": eta,
                "epoch": _number(logs.get("epoch", state.epoch)),
                "grad_norm": _number(logs.get("grad_norm")),
            }
            for key in ("rewards/accuracies", "rewards/margins", "mean_token_accuracy"):
                if key in logs:
                    data[key.replace("/", "_")] = _number(logs[key])
            self.latest = data
            if reporter.main:
                reporter.store.add_job_event(reporter.job_id, "progress", step=step, data=data)
                reporter.store.update_job(
                    reporter.job_id, progress=step / total if total else 0.0, metrics=data
                )

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            path = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
            reporter.event(
                "checkpoint",
                message=f"checkpoint at step {state.global_step}",
                step=int(state.global_step),
                path=str(path),
            )

    return JobCallback()


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _broadcast_flag(flag: bool, args: Any) -> bool:
    """Rank 0's answer to every rank, so all stop at the same step."""
    import torch
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return flag
    tensor = torch.tensor([1 if flag else 0], device=args.device)
    dist.broadcast(tensor, src=0)
    return bool(tensor.item())


# -- the run ------------------------------------------------------------------------------------


def run_training(
    store: TraceStore,
    job: Job,
    *,
    baseline_event: int,
    reporter: Reporter,
    world_size: int = 1,
    hardware: Hardware | None = None,
) -> str:
    """Train the job's adapter; on the main process publish and register it. Returns
    "completed" or "cancelled". Raises TrainingError (or anything else) on failure."""
    options = JobOptions.from_config(job.config)
    folder = job_dir(job)
    path = dataset_path(job)
    report = json.loads((folder / DATASET_REPORT).read_text(encoding="utf-8"))

    warnings.filterwarnings("ignore", category=FutureWarning)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_warning()
    hf_logging.disable_progress_bar()
    base = options.base_model
    try:
        config = AutoConfig.from_pretrained(base)
    except (OSError, ValueError) as exc:
        raise TrainingError(f"cannot load base model {base!r}: {_one_line(exc)}") from exc
    shape = ModelShape.from_config(config)
    hardware = hardware or detect_hardware()
    settings = pick_settings(
        options.kind,
        shape,
        hardware,
        max_length=options.max_length,
        lora_r=options.lora_r,
        qlora=options.qlora,
        batch_size=options.batch_size,
    )
    if options.cpu_threads and settings.device == "cpu":
        settings = replace(settings, cpu_threads=options.cpu_threads)
    reporter.log(f"settings: {settings.describe()}", settings=settings.as_dict())
    for note in settings.notes:
        reporter.log(f"settings: {note}")

    if settings.cpu_threads:
        torch.set_num_threads(settings.cpu_threads)
    rows = load_rows(path, options.kind, folder / "hf-datasets")
    tokenizer = AutoTokenizer.from_pretrained(base)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    rows, cut = fit_prompts(rows, tokenizer, options.max_length)
    if cut:
        reporter.log(
            f"{cut} of {len(rows)} rows longer than {options.max_length} tokens: "
            "their prompts keep their last tokens"
        )
    model = AutoModelForCausalLM.from_pretrained(base, **model_kwargs(settings))
    if settings.quantize_4bit:
        from peft import prepare_model_for_kbit_training

        model = prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=settings.gradient_checkpointing
        )

    peft_config = lora_config(options.lora_r)
    if job.config.get("start_path"):
        from peft import PeftModel

        reporter.log(f"starting from adapter {options.start_from}")
        model = PeftModel.from_pretrained(  # type: ignore[assignment]
            model, job.config["start_path"], is_trainable=True
        )
        peft_config = None  # the adapter's own LoRA settings go on

    output = checkpoints_dir(job)
    output.mkdir(parents=True, exist_ok=True)
    resume_from = _prepare_resume(output)
    common = {
        "output_dir": str(output),
        "num_train_epochs": options.epochs,
        "max_steps": options.max_steps,
        "learning_rate": options.lr,
        "logging_steps": options.logging_steps,
        "save_strategy": "steps",
        "save_steps": options.save_steps,
        "save_total_limit": 2,
        "report_to": "none",
        "seed": options.seed,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
        **trl_config_kwargs(options.kind, settings, options.max_length),
    }
    callback = _make_callback(
        reporter,
        baseline_event=baseline_event,
        poll_seconds=options.poll_seconds,
        world_size=world_size,
    )
    import trl

    name = {JobKind.SFT: "SFT", JobKind.DPO: "DPO", JobKind.KTO: "KTO"}[options.kind]
    # DPO and KTO's reference is the base with the adapter switched off (ref_model None)
    reference = {} if options.kind is JobKind.SFT else {"ref_model": None}
    trainer_class = getattr(trl, f"{name}Trainer")
    if options.kind is JobKind.SFT and settings.device == "cpu":
        trainer_class = type(
            "CompletionLossSFTTrainer", (trainer_class,), {"compute_loss": _completion_compute_loss}
        )
    trainer: Any = trainer_class(
        model=model,
        args=getattr(trl, f"{name}Config")(**common),
        train_dataset=rows,
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[callback],
        **reference,
    )
    if options.kind is not JobKind.SFT and settings.device == "cpu":
        compact_fused_head(trainer.model.get_base_model())
    if resume_from is not None:
        reporter.log(f"resuming from {resume_from.name}")
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)

    # Events before the status: whoever sees the job finished has its last word too.
    if callback.cancelled:
        reporter.log(
            f"cancelled at step {trainer.state.global_step}; checkpoint saved: "
            f"`agent-console train resume {job.id}` continues it"
        )
        reporter.update(status=JobStatus.CANCELLED, error=None)
        return "cancelled"

    metrics = dict(callback.latest)
    metrics.update({k: v for k, v in callback.summary.items() if k != "total_flos"})
    metrics["steps"] = int(trainer.state.global_step)
    if torch.cuda.is_available():
        metrics["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 2)
    metrics["settings"] = settings.as_dict()
    metrics["dataset"] = {
        "path": str(path),
        "rows": report["rows"],
        "sessions": report.get("sessions"),
        "since": options.since,
        "kind": options.kind.value,
    }
    staging = adapter_path(job).with_name(f".{job.name}.tmp-{job.id}")
    if reporter.main and staging.exists():
        shutil.rmtree(staging)
    trainer.save_model(str(staging))
    if not reporter.main:
        return "completed"
    final = publish_adapter(store, job, staging, metrics)
    reporter.event(
        "done",
        message=f"adapter {job.name!r} registered at {final}",
        step=metrics["steps"],
        adapter=job.name,
        path=str(final),
        metrics={k: v for k, v in metrics.items() if k not in ("settings", "dataset")},
    )
    reporter.update(status=JobStatus.COMPLETED, progress=1.0, metrics=metrics, error=None)
    return "completed"


def _prepare_resume(output: Path) -> Path | None:
    """The checkpoint to continue from; checkpoints past it (cut short by a kill while
    saving) are removed so the trainer's rotation never counts them."""
    latest = last_checkpoint(output)
    latest_step = (checkpoint_step(latest) if latest else None) or -1
    for candidate in output.iterdir():
        step = checkpoint_step(candidate)
        if step is not None and step > latest_step and candidate.is_dir():
            shutil.rmtree(candidate, ignore_errors=True)
    return latest


def publish_adapter(store: TraceStore, job: Job, staging: Path, metrics: dict[str, Any]) -> Path:
    """Move the saved adapter from `staging` to adapters/<name>/ with one rename, then
    register it: the registry never names a folder that is not whole, and a failure to
    register leaves no folder behind."""
    final = adapter_path(job)
    config_file = staging / "adapter_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = job.base_model or config.get("base_model_name_or_path")
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True), encoding="utf-8")
    (staging / "training_args.bin").unlink(missing_ok=True)  # a pickle: nothing needs it
    (staging / ADAPTER_MARKER).write_text(json.dumps({"job": job.id, "name": job.name}))
    _check_saved_adapter(job, staging)
    _sync_tree(staging)  # whole on disk before the rename names it, power cut or not
    if final.exists():
        if _made_by(final) != job.id:
            raise TrainingError(f"{final} already exists (not this job's): rename or remove it")
        try:
            store.get_adapter(job.name)
        except NotFoundError:
            shutil.rmtree(final)  # this job's, published but never registered (killed)
        else:
            raise TrainingError(f"an adapter named {job.name!r} is already registered")
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staging, final)
    _sync_tree(final.parent, files=False)  # the rename itself
    try:
        store.register_adapter(
            job.name,
            base_model=job.base_model or str(config.get("base_model_name_or_path")),
            path=final,
            job_id=job.id,
            metrics=metrics,
        )
    except BaseException:
        shutil.rmtree(final, ignore_errors=True)
        raise
    return final


def _check_saved_adapter(job: Job, staging: Path) -> None:
    """TrainingError unless `staging` holds a LoRA adapter the backends will load (its
    config, and weights whose safetensors header covers the whole file)."""
    from agents.backends.base import AdapterError
    from agents.backends.lora import read_adapter

    try:
        read_adapter(job.name, staging)
    except AdapterError as exc:
        raise TrainingError(f"the saved adapter is not whole: {exc}") from None


def _sync_tree(folder: Path, *, files: bool = True) -> None:
    """fsync the files under `folder` (when `files`), then the folder itself."""
    paths = [p for p in folder.rglob("*") if p.is_file()] if files else []
    for path in [*paths, folder]:
        flags = os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if path == folder else 0)
        try:
            fd = os.open(path, flags)
        except OSError:
            continue  # a folder that cannot be opened to sync (not on Linux): skip it
        try:
            os.fsync(fd)
        except OSError:
            pass  # some file systems cannot fsync a folder; the files are synced
        finally:
            os.close(fd)


def _made_by(folder: Path) -> int | None:
    try:
        return int(json.loads((folder / ADAPTER_MARKER).read_text())["job"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
