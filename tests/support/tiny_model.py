"""A real, tiny causal LM and LoRA adapter, built locally in seconds.

No model weights can be downloaded on the build and CI machines, yet the backends must be
tested against a real model: real tokenizer, real `generate`, real logprobs, real peft and
vLLM loading. So the tests build one: a byte-level BPE tokenizer trained on a generated
corpus and a random-init `Qwen2ForCausalLM` (~0.5M parameters). Its output is gibberish;
everything around the output (shapes, ids, logprobs, stop handling, adapters, serving) is
exactly what a real Qwen2 checkpoint exercises.

Why the details matter:
- The tokenizer uses Qwen2's own normalizer (NFC) and split regex: transformers 5
  `AutoTokenizer` rebuilds Qwen2's pre-tokenizer for a `model_type=qwen2` folder, and vLLM
  loads it through its own transformers, so any other pre-tokenizer would make the ids
  differ silently between the raw tokenizer, AutoTokenizer and vLLM.
- yes/no spellings must be single tokens, or `score_yes_no` has nothing to score.
- head_dim 32 (hidden 128, 4 heads): vLLM's CPU attention fails below 32.
- The chat template has `{% generation %}` markers so trl's `assistant_only_loss` works.

Everything is seeded: the same arguments give byte-identical files, so a folder built once
is reused (a marker file records what was built).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

#: Bump when the builder changes what it writes, so stale cached folders are rebuilt.
BUILDER_VERSION = 1
MODEL_MARKER = "tiny_model.complete.json"
ADAPTER_MARKER = "tiny_adapter.complete.json"

VOCAB_SIZE = 3000
MAX_POSITIONS = 8192
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
#: Spellings that must come out of the tokenizer as one token each (the yes/no scorer
#: and the tests rely on them).
SINGLE_TOKEN_WORDS = (
    "yes",
    " yes",
    "Yes",
    " Yes",
    "no",
    " no",
    "No",
    " No",
    "YES",
    " YES",
    "NO",
    " NO",
)

# Copied from transformers/models/qwen2/tokenization_qwen2.py (5.23): it must be identical.
QWEN2_PRETOKENIZE_REGEX = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

# ChatML as Qwen2.5 writes it, with trl's `{% generation %}` markers around what the
# assistant writes (its content and the closing <|im_end|>) so only that is trained on.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['role'] == 'assistant' %}"
    "{% generation %}{{- message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{{- '\\n' }}"
    "{%- else %}"
    "{{- message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _words(text: str) -> list[str]:
    """Word lists read best as prose."""
    return text.split()


_WORDS = _words("""
the be to of and a in that have I it for not on with he as you do at this but his by from
they we say her she or an will my one all would there their what so up out if about who get
which go me when make can like time just him know take people into year your good some
could them see other than then now look only come its over think also back after use two
how our work first well way even new want because any these give day most us is are was
were been has had did does said made went task action evaluation observation expectation
orientation outcome block error debug tick score model agent operator label train adapter
question answer true false none check result file line code test value list string number
progress likely correct wrong right left start end open close read write run call return
""")

_SYLLABLES = _words(
    "ba be bi bo bu ca ce ci co cu da de di do du fa fe fi fo ga ge gi go ha he hi ho ka ke ki "
    "ko la le li lo lu ma me mi mo mu na ne ni no nu pa pe pi po ra re ri ro ru sa se si so su "
    "ta te ti to tu va ve vi vo wa we wi ya yo za ze zi zo ch sh th st tr pl br gr ing er ed ly "
    "tion ment ness able ous"
)

_GREEK = _words("Καλημέρα κόσμε αυτό είναι ένα μικρό δοκιμαστικό κείμενο με ελληνικά γράμματα")
_CYRILLIC = _words("Привет мир это маленький тестовый текст на русском языке да нет")
_CJK = ["你好", "世界", "模型", "测试", "数据", "日本語", "テキスト", "한국어", "문장", "東京"]

_CODE = [
    "def action_{name}(subagent):\n    result = subagent.tools['{name}'].run({n})\n"
    "    return result == {m}\n",
    "self.add_action('{title}', action_{name})\n",
    "self.add_evaluation('{title}', check_{name})\n",
    "for i in range({n}):\n\tif i % {m} == 0:\n\t\tprint(i, '{name}')\n",
    "class {cls}:\n    def __init__(self, value: int = {n}) -> None:\n        self.value = value\n",
    "import os\nimport sys\nfrom pathlib import Path\n\npath = Path('{name}.txt')\n",
    "with open('{name}.json') as f:\n    data = json.load(f)\n    assert len(data) > {m}\n",
    "#startblock type: {kind}\n#index {n}\n#timestamp 1740912{m}.13\n",
    "#q: Is this {kind} likely to make progress on the task? {answer}. ({n}.{m}%)\n#endblock\n",
    "x = [{n}, {m}, {n} + {m}]  # {title}\n",
]
_KINDS = ("action", "evaluation", "orientation", "expectation", "observation", "debug")
_ANSWERS = ("Yes", "No", "yes", "no", "YES", "NO")
_SPACES = (" ", "  ", "    ", "\t", "\n", "\n\n", "   \n", "\t\t", "        ", "\r\n")


def _corpus(seed: int) -> list[str]:
    """A few thousand lines mixing the text the agent will see: English with many yes/no
    answers, Python in weave-agent's block format, numbers, Greek, Cyrillic, CJK and runs
    of whitespace (tabs, indents, blank lines) that Qwen2's regex treats specially."""
    rng = random.Random(seed)
    # Made-up words (identifiers, names) fill the vocabulary to a realistic few thousand.
    coined = sorted(
        {"".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(3000)}
    )
    lines: list[str] = []
    for _ in range(3000):
        words = [coined[min(int(rng.paretovariate(0.7)), len(coined)) - 1] for _ in range(8)]
        if rng.random() < 0.3:
            words = [w.capitalize() for w in words]
        lines.append(rng.choice((" ", "_", " ", ".", ", ")).join(words))
    for _ in range(2500):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        if rng.random() < 0.5:
            words.insert(rng.randrange(len(words) + 1), rng.choice(_ANSWERS))
        sentence = " ".join(words)
        lines.append(sentence[0].upper() + sentence[1:] + rng.choice((".", "?", "!", ":", ",")))
    for _ in range(800):
        lines.append(
            rng.choice(_CODE).format(
                name=rng.choice(_WORDS),
                title=" ".join(rng.choice(_WORDS) for _ in range(3)),
                cls=rng.choice(_WORDS).capitalize(),
                kind=rng.choice(_KINDS),
                answer=rng.choice(_ANSWERS),
                n=rng.randint(0, 99999),
                m=rng.randint(0, 999),
            )
        )
    for _ in range(300):
        lines.append(" ".join(str(rng.randint(0, 10 ** rng.randint(1, 9))) for _ in range(6)))
        lines.append(" ".join(rng.choice(_GREEK) for _ in range(6)))
        lines.append(" ".join(rng.choice(_CYRILLIC) for _ in range(6)))
        lines.append("".join(rng.choice(_CJK) for _ in range(5)))
        lines.append(rng.choice(_SPACES).join(rng.choice(_WORDS) for _ in range(5)))
    # Every yes/no spelling, at line start and after a space, many times over.
    answers = " ".join(w.strip() for w in SINGLE_TOKEN_WORDS)
    lines.extend([answers] * 200)
    rng.shuffle(lines)
    return lines


def _train_tokenizer(seed: int) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
    from tokenizers.models import BPE
    from tokenizers.trainers import BpeTrainer

    tokenizer = Tokenizer(BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(
        add_prefix_space=False, trim_offsets=False, use_regex=False
    )
    trainer = BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(seed), trainer=trainer)
    for spelling in SINGLE_TOKEN_WORDS:
        ids = tokenizer.encode(spelling, add_special_tokens=False).ids
        if len(ids) != 1:
            raise RuntimeError(f"tiny tokenizer splits {spelling!r} into {ids}: fix the corpus")
    return tokenizer


def _marker_matches(folder: Path, name: str, expected: dict[str, Any]) -> bool:
    try:
        return bool(json.loads((folder / name).read_text()) == expected)
    except (OSError, ValueError):
        return False


def _publish(built: Path, folder: Path, marker: str, record: dict[str, Any]) -> None:
    """Move the built files into `folder`, marker last: a folder with a matching marker
    is complete, so a crash mid-build never leaves something that passes for finished."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / marker).unlink(missing_ok=True)
    for item in built.iterdir():
        os.replace(item, folder / item.name)
    (folder / marker).write_text(json.dumps(record, sort_keys=True))


def build_tiny_model(
    folder: Path,
    *,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    norm_scale: float = 1.0,
) -> Path:
    """Build (or reuse if already complete in `folder`) a deterministic random-init
    Qwen2ForCausalLM + tokenizer, saved with safetensors; returns folder.

    `norm_scale` sets the final RMSNorm's weights. At 1 (a fresh init) the logits can
    never spread further than about 2.5 (the norm fixes the hidden state's length and
    the tied embeddings are small), so no LoRA over the linear layers can make the model
    confident of anything: every sample stays near-uniform noise. A trained checkpoint's
    final norm is several times larger; the closed-loop training test builds the model
    with a scale like that so what the adapter learns shows in samples.

    The folder loads with `AutoModelForCausalLM`/`AutoTokenizer`, vLLM (`--model folder`)
    and trl. eos is `<|im_end|>` (ChatML turn end), pad is `<|endoftext|>`."""
    folder = Path(folder)
    record = {
        "builder": BUILDER_VERSION,
        "hidden": hidden,
        "layers": layers,
        "heads": heads,
        "seed": seed,
    }
    if norm_scale != 1.0:
        record["norm_scale"] = norm_scale
    if _marker_matches(folder, MODEL_MARKER, record):
        return folder
    if hidden % heads or hidden // heads < 32:
        raise ValueError(f"hidden {hidden} / heads {heads}: head_dim must be an integer >= 32")

    import torch
    from transformers import (
        GenerationConfig,
        PreTrainedTokenizerFast,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    raw = _train_tokenizer(seed)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=MAX_POSITIONS,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=MAX_POSITIONS,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        dtype="float32",
    )
    config.architectures = ["Qwen2ForCausalLM"]
    # Forked generator state: building must not disturb the caller's global torch RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model: Any = Qwen2ForCausalLM(config)
        with torch.no_grad():
            model.model.norm.weight.fill_(norm_scale)
    model.to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )

    folder.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=".tiny-model-", dir=folder.parent))
    try:
        model.save_pretrained(built, safe_serialization=True)
        tokenizer.save_pretrained(built)
        # Name the class real Qwen2 checkpoints name, so every transformers version (the
        # test venv's, vLLM's) loads it the same way Qwen2.5 loads.
        tokenizer_config_path = built / "tokenizer_config.json"
        tokenizer_config = json.loads(tokenizer_config_path.read_text())
        tokenizer_config["tokenizer_class"] = "Qwen2Tokenizer"
        tokenizer_config_path.write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True))
        _publish(built, folder, MODEL_MARKER, record)
    finally:
        shutil.rmtree(built, ignore_errors=True)
    return folder


def build_tiny_adapter(model_dir: Path, folder: Path, *, seed: int = 1, rank: int = 8) -> Path:
    """A peft LoRA adapter (random non-zero B so it changes outputs) for the tiny model,
    saved in PEFT format (adapter_config.json + adapter_model.safetensors) that both
    peft and vLLM --lora-modules load; returns folder.

    peft initialises B to zero (an adapter that does nothing), which would make "the
    adapter changed the output" untestable, so B is drawn at random, scaled so the
    greedy continuation visibly changes."""
    model_dir, folder = Path(model_dir), Path(folder)
    record = {
        "builder": BUILDER_VERSION,
        "model_dir": str(model_dir.resolve()),
        "seed": seed,
        "rank": rank,
    }
    if _marker_matches(folder, ADAPTER_MARKER, record):
        return folder

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    lora = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=[
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ],
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        peft_model = get_peft_model(base, lora)
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "lora_A" in name or "lora_B" in name:
                    param.normal_(0.0, 0.1)
    folder.parent.mkdir(parents=True, exist_ok=True)
    built = Path(tempfile.mkdtemp(prefix=".tiny-adapter-", dir=folder.parent))
    try:
        peft_model.save_pretrained(str(built), safe_serialization=True)
        # Point at the base folder by absolute path: peft and vLLM both read this field.
        config_path = built / "adapter_config.json"
        adapter_config = json.loads(config_path.read_text())
        adapter_config["base_model_name_or_path"] = str(model_dir.resolve())
        # peft writes target_modules from a set: sort it so the bytes are reproducible.
        adapter_config["target_modules"] = sorted(adapter_config["target_modules"])
        config_path.write_text(json.dumps(adapter_config, indent=2, sort_keys=True))
        _publish(built, folder, ADAPTER_MARKER, record)
    finally:
        shutil.rmtree(built, ignore_errors=True)
    return folder
