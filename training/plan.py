"""A training run's plan: the settings for the model's shape and the hardware, and the
trl, transformers and peft arguments they stand for. Nothing heavy is imported at module
level: `pick_settings` is testable (and the bench's parent process runs) without torch.

How settings are picked (`pick_settings`), from the model's shape and the device:
- CPU (or Apple MPS): float32, no gradient checkpointing, no packing: small models only;
  bf16 base weights where the CPU multiplies bf16 natively and the model is big enough for
  it to pay (the backend's rule). On a CPU only the positions the loss is on go through
  the LM head: SFT's loss (`completion_loss`), DPO's and KTO's log-probabilities
  (`compact_fused_head`), in training/losses.py. SFT and DPO run their batch a row (a
  pair) at a time, with gradient accumulation: no padding to another row's length.
- CUDA: bf16 (fp16 where the GPU has no bf16); SFT packs sequences where FlashAttention 2
  is installed, else pads each micro-batch to its longest row: trl's best-fit packing is
  padding-free, it flattens the micro-batch into one row, which trl supports with
  FlashAttention only (through sdpa, one row of 8 x 4k tokens, the 0.5B run was slower
  than trl's defaults and took 90 GiB against 55.5 planned); Liger kernels when
  `liger_kernel` is importable; gradient checkpointing only when the batch does not fit
  in free memory without it: first the micro-batch shrinks (gradient accumulation keeps
  the effective batch), and only a single sequence that does not fit turns it on.
  Checkpointing costs about a third more compute, so it is the last resort, not trl's
  default.
- QLoRA (4-bit base weights, bitsandbytes) only when asked and installed, on CUDA.
- More than one GPU: one process per GPU under `accelerate launch` (the worker does that).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any

from agents.backends.transformers_backend import BF16_CPU_MIN_PARAMETERS
from storage import JobKind
from training.errors import TrainingError
from training.hardware import Hardware, ModelShape

GIB = 1024**3
#: The share of free GPU memory a configuration may plan to use (fragmentation, the
#: CUDA context, allocator slack take the rest).
MEMORY_BUDGET = 0.88
#: Fixed allowance for the CUDA context, cuBLAS workspaces and the allocator.
MEMORY_OVERHEAD = int(1.5 * GIB)
#: The effective batch (sequences, or pairs for DPO) per optimizer step: trl's default.
EFFECTIVE_BATCH = 8


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
    #: the attention implementation on a GPU ("flash_attention_2" to pack, else "sdpa")
    attention: str = "sdpa"
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
        if self.packing and self.attention != "sdpa":
            parts.append("FlashAttention 2")
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
        # SFT and DPO take one row (pair) a micro-batch and accumulate the batch: the
        # same steps and losses, no padding to another row's length. An agent's rows
        # differ in length (425 to 1,267 tokens on the coder's starter sessions); a
        # padded batch of 4 took twice the time. KTO needs its batch whole: each
        # example's KL is taken against another's.
        micro = size if kind is JobKind.KTO else 1
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
            per_device_batch_size=micro,
            # The batch asked for is the batch: on a CPU the data sets are small, and a
            # bigger one would leave a handful of examples a step or two per epoch.
            gradient_accumulation_steps=size // micro,
            quantize_4bit=False,
            processes=1,
            cpu_threads=threads,
            notes=tuple(notes),
        )

    dtype = "bfloat16" if hardware.bf16 else "float16"
    if not hardware.bf16:
        notes.append("no bf16 on this GPU: fp16 mixed precision")
    packing = kind is JobKind.SFT and hardware.flash_attention
    if kind is JobKind.SFT and not packing:
        notes.append(
            "no packing: trl packs padding-free, one row a micro-batch, which needs "
            "FlashAttention 2 (pip install flash-attn); without it rows are padded"
        )
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
        attention="flash_attention_2" if packing else "sdpa",
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
        values["attn_implementation"] = settings.attention
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


def lora_config(rank: int) -> Any:
    from peft import LoraConfig

    return LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,  # dropout copies every adapted layer's input: memory, no gain here
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
