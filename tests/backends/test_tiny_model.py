"""The tiny test model is what every backend test stands on: check it is the real thing.

Token ids must agree between the raw tokenizer, transformers' AutoTokenizer (which rebuilds
Qwen2's pre-tokenizer) and vLLM's transformers; yes/no must be single tokens; the chat
template must mark assistant tokens for trl; builds must be byte-identical.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from safetensors import safe_open

from agents.backends.base import yes_no_token_ids
from tests.support.tiny_model import (
    MODEL_MARKER,
    SINGLE_TOKEN_WORDS,
    build_tiny_adapter,
    build_tiny_model,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"

#: Mixed scripts, NFD input (NFC must compose it), tabs, CRLF, runs of spaces and newlines,
#: digits (Qwen2 splits them one by one), contractions, ChatML special tokens in the text.
MIXED = (
    "Hello  world!\n\n\tdef f(x):\n        return x+1  \r\n"
    "Καλημέρα κόσμε · Привет мир · 你好世界 東京 テキスト 한국어\n"
    "café\u0301 naïve 1234567 3.14159 it's we'll  yes Yes no No YES\n\n\n   \t \n"
    "<|im_start|>user\nIs it?<|im_end|>\n"
)


def test_autotokenizer_and_raw_tokenizer_give_the_same_ids(tiny_model_dir: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(tiny_model_dir)
    raw = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    ids = auto(MIXED, add_special_tokens=False)["input_ids"]
    assert ids == raw.encode(MIXED, add_special_tokens=False).ids
    assert len(ids) > 40
    # ChatML markers in text are the special tokens, not their characters.
    assert auto.convert_tokens_to_ids("<|im_start|>") in ids
    # Byte-level: decoding gives the NFC text back exactly.
    assert auto.decode(ids) == unicodedata.normalize("NFC", MIXED)


@pytest.mark.skipif(not VLLM_PYTHON.exists(), reason="no .venv-vllm (vLLM's transformers)")
def test_vllm_venv_transformers_gives_the_same_ids(tiny_model_dir: Path) -> None:
    """vLLM loads the tokenizer through its own (older) transformers: same ids."""
    from transformers import AutoTokenizer

    probe = (
        "import json, sys\n"
        "from transformers import AutoTokenizer\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "print(json.dumps(tok(sys.argv[2], add_special_tokens=False)['input_ids']))\n"
    )
    done = subprocess.run(
        [str(VLLM_PYTHON), "-c", probe, str(tiny_model_dir), MIXED],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    ours = AutoTokenizer.from_pretrained(tiny_model_dir)(MIXED, add_special_tokens=False)
    assert theirs == ours["input_ids"]


def test_yes_and_no_spellings_are_single_tokens(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(tiny_model_dir)
    encoded = {w: tokenizer.encode(w, add_special_tokens=False) for w in SINGLE_TOKEN_WORDS}
    assert all(len(ids) == 1 for ids in encoded.values()), encoded
    yes, no = yes_no_token_ids(lambda t: tokenizer.encode(t, add_special_tokens=False))
    assert len(yes) == 6 and len(no) == 6 and not set(yes) & set(no)
    assert 2000 <= len(tokenizer) <= 4000


def test_special_tokens_and_chat_template(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(tiny_model_dir)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.bos_token is None
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Is it?"},
        {"role": "assistant", "content": "Yes"},
    ]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nIs it?<|im_end|>\n"
        "<|im_start|>assistant\nYes<|im_end|>\n"
    )
    prompt = tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    # trl's assistant_only_loss reads this mask: exactly "Yes<|im_end|>" is the assistant's.
    out = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    marked = [t for t, m in zip(out["input_ids"], out["assistant_masks"], strict=True) if m]
    assert tokenizer.decode(marked) == "Yes<|im_end|>"


def test_config_and_weights(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert config["architectures"] == ["Qwen2ForCausalLM"]
    assert config["hidden_size"] // config["num_attention_heads"] == 32  # vLLM CPU minimum
    assert config["max_position_embeddings"] == 8192
    assert not list(tiny_model_dir.glob("*.bin"))
    with safe_open(str(tiny_model_dir / "model.safetensors"), framework="pt") as weights:
        names = list(weights.keys())
        dtypes = {str(weights.get_slice(name).get_dtype()) for name in names}
        size = sum(math.prod(weights.get_slice(name).get_shape()) for name in names)
    assert dtypes == {"F32"}
    assert 200_000 < size < 2_000_000


def test_builds_are_byte_identical_and_reused(tiny_model_dir: Path, tmp_path: Path) -> None:
    again = build_tiny_model(tmp_path / "again")
    built = sorted(p.name for p in tiny_model_dir.iterdir())
    assert built == sorted(p.name for p in again.iterdir())
    for name in built:
        assert (again / name).read_bytes() == (tiny_model_dir / name).read_bytes(), name
    stamp = (again / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(again) == again
    assert (again / "model.safetensors").stat().st_mtime_ns == stamp
    # A folder whose build did not finish (no marker) is rebuilt, not trusted.
    (again / MODEL_MARKER).unlink()
    (again / "config.json").write_text("{}")
    build_tiny_model(again)
    assert (again / "config.json").read_bytes() == (tiny_model_dir / "config.json").read_bytes()


def test_head_dim_below_vllm_minimum_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="head_dim"):
        build_tiny_model(tmp_path / "m", hidden=64, heads=4)


def test_adapter_is_peft_format_and_changes_the_model(
    tiny_model_dir: Path, tiny_adapter_dir: Path, tmp_path: Path
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    assert (tiny_adapter_dir / "adapter_model.safetensors").is_file()
    config = json.loads((tiny_adapter_dir / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 8
    assert config["base_model_name_or_path"] == str(tiny_model_dir.resolve())
    assert config["target_modules"] == sorted(config["target_modules"])

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = torch.tensor([[10, 200, 300, 400]])
    with torch.inference_mode():
        before = base(ids).logits
        tuned = PeftModel.from_pretrained(base, str(tiny_adapter_dir)).eval()
        after = tuned(ids).logits
    assert (after - before).abs().max().item() > 0.1

    # Deterministic too: the same seed gives the same bytes.
    again = build_tiny_adapter(tiny_model_dir, tmp_path / "again")
    weights = "adapter_model.safetensors"
    assert (again / weights).read_bytes() == (tiny_adapter_dir / weights).read_bytes()
