"""The model's shape and the machine: what a training run's plan (training/plan.py) is made
from. `detect_hardware` imports torch inside the function; the rest needs only a config.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agents.backends.transformers_backend import cpu_has_bf16
from training.errors import TrainingError

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
    #: FlashAttention 2 (`flash_attn`) is installed: padding-free packing can run on it
    flash_attention: bool = False
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
    flash = importlib.util.find_spec("flash_attn") is not None
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
            flash_attention=flash,
            name=torch.cuda.get_device_name(0),
            cpu_count=cores,
        )
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return Hardware(device="mps", cpu_count=cores)
    return Hardware(
        device="cpu", bf16=cpu_has_bf16(torch), liger=liger, bitsandbytes=bnb, cpu_count=cores
    )
