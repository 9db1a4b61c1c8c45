"""TransformersBackend against a real (tiny, random-init) Qwen2 model: real generate, real
logprobs checked against an independent forward pass, real peft adapters."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.backends.base import (
    AdapterError,
    BackendError,
    Candidate,
    ContextOverflowError,
    ModelNotFoundError,
    logsumexp,
)
from agents.backends.transformers_backend import DEFAULT_MODEL, TransformersBackend

REPO_ROOT = Path(__file__).resolve().parents[2]
PROMPT = "#startblock type: action\n#index 3\n\ndef action_check(subagent):\n"
QUESTIONS = [
    "Is this action likely to make progress on the task? Answer:",
    "x",
    "#q: Will the file contain the key?",
    "Καλημέρα κόσμε. Is this Greek?",
]


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path) -> Iterator[TransformersBackend]:
    """One shared backend for the read-only tests (adapter tests make their own)."""
    opened = TransformersBackend(str(tiny_model_dir))
    yield opened
    opened.close()


@pytest.fixture
def fresh(tiny_model_dir: Path) -> Iterator[TransformersBackend]:
    opened = TransformersBackend(str(tiny_model_dir))
    yield opened
    opened.close()


def forward_logprobs(
    backend: TransformersBackend, prompt: list[int], cand: Candidate, t: float
) -> tuple[Any, Any]:
    """Independent check: one full forward pass over prompt + completion, no cache, no
    generate; the log-softmax of temperature-scaled logits at each completion position."""
    import torch

    ids = torch.tensor([prompt + cand.token_ids])
    with torch.inference_mode():
        logits = backend._base(input_ids=ids).logits[0].float()
    steps = logits[len(prompt) - 1 : -1] / (t if t > 0 else 1.0)
    return steps.log_softmax(-1), torch.tensor(cand.token_ids)


# ---- loading and import hygiene -----------------------------------------------------


def test_importing_the_module_loads_no_ml_stack() -> None:
    probe = (
        "import json, sys\n"
        "import agents.backends.transformers_backend\n"
        "print(json.dumps(sorted(m for m in ('torch', 'transformers', 'peft') if m in sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_default_model_is_the_small_qwen_instruct() -> None:
    assert DEFAULT_MODEL == "Qwen/Qwen2.5-0.5B-Instruct"


def test_missing_model_folder_names_the_way_out(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelNotFoundError) as caught:
        TransformersBackend(str(missing))
    message = str(caught.value)
    assert str(missing) in message and "--model" in message and "--base-url" in message
    assert "\n" not in message


def test_folder_without_a_model_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match=r"config\.json"):
        TransformersBackend(str(tmp_path))


def test_uncached_hub_id_offline_is_not_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(ModelNotFoundError) as caught:
        TransformersBackend("nobody/not-a-model")
    message = str(caught.value)
    assert "nobody/not-a-model" in message and "HF_HUB_OFFLINE" in message
    assert "--model" in message and "--base-url" in message and "\n" not in message


def test_unreachable_hub_fails_at_once(tmp_path: Path) -> None:
    """Not cached and the hub down: one line in seconds, not huggingface_hub's retries."""
    import os
    import socket
    import time

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: nobody listens
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=f"http://127.0.0.1:{port}", HF_HOME=str(tmp_path / "hf"))
    code = (
        "from agents.backends.transformers_backend import TransformersBackend\n"
        "from agents.backends.base import ModelNotFoundError\n"
        "try:\n    TransformersBackend('nobody/not-a-model')\n"
        "except ModelNotFoundError as e:\n    print(e)\n"
    )
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    elapsed = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    assert "cannot be reached" in done.stdout and "--model PATH" in done.stdout
    assert elapsed < 30  # huggingface_hub's own retries took ~48 s here


def test_basics(backend: TransformersBackend, tiny_model_dir: Path) -> None:
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(tiny_model_dir / "tokenizer.json"))
    assert backend.name == "transformers" and backend.model == str(tiny_model_dir)
    assert backend.context_length == 8192
    text = "def f(x):\n\treturn x  # Привет 你好 <|im_end|>"
    assert backend.tokenize(text) == raw.encode(text, add_special_tokens=False).ids
    chat = backend.render_chat([{"role": "user", "content": "Hi"}])
    assert chat == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert backend.adapters() == [] and backend.active_adapter is None


# ---- generate ------------------------------------------------------------------------


def test_n_candidates_with_ids_logprobs_and_finish(backend: TransformersBackend) -> None:
    candidates = backend.generate(PROMPT, n=4, max_tokens=12, temperature=1.0, seed=0)
    assert len(candidates) == 4
    for cand in candidates:
        assert 1 <= len(cand.token_ids) == len(cand.logprobs) <= 12
        assert all(lp <= 0.0 and math.isfinite(lp) for lp in cand.logprobs)
        assert cand.finish_reason in ("stop", "length")
        assert cand.text == backend._decode(cand.token_ids) or cand.finish_reason == "stop"
    assert len({tuple(c.token_ids) for c in candidates}) == 4


def test_seed_makes_sampling_repeatable(backend: TransformersBackend) -> None:
    first = backend.generate(PROMPT, n=3, max_tokens=10, seed=11)
    assert backend.generate(PROMPT, n=3, max_tokens=10, seed=11) == first
    assert backend.generate(PROMPT, n=3, max_tokens=10, seed=12) != first


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_logprobs_match_a_separate_forward_pass(
    backend: TransformersBackend, temperature: float
) -> None:
    prompt = backend.tokenize(PROMPT)
    n = 1 if temperature == 0 else 3
    for cand in backend.generate(prompt, n=n, max_tokens=16, temperature=temperature, seed=5):
        steps, chosen = forward_logprobs(backend, prompt, cand, temperature)
        expected = steps.gather(-1, chosen[:, None]).squeeze(-1).tolist()
        assert cand.logprobs == pytest.approx(expected, abs=1e-4)
        if temperature == 0:  # greedy: every token is the argmax
            assert steps.argmax(-1).tolist() == cand.token_ids


def test_greedy_candidates_are_identical(backend: TransformersBackend) -> None:
    candidates = backend.generate(PROMPT, n=3, max_tokens=8, temperature=0)
    assert candidates[0] == candidates[1] == candidates[2]


def test_sampling_uses_the_whole_distribution(backend: TransformersBackend) -> None:
    """No hidden top-k/top-p: generate's default top_k=50 would keep every draw in the
    50 likeliest tokens; the tiny model's distribution is nearly flat over ~2,700."""
    prompt = backend.tokenize(PROMPT)
    candidates = backend.generate(prompt, n=64, max_tokens=1, temperature=1.0, seed=3)
    steps, _ = forward_logprobs(backend, prompt, candidates[0], 1.0)
    ranks = steps[0].argsort(descending=True).argsort()
    assert max(int(ranks[c.token_ids[0]]) for c in candidates) > 50


@pytest.mark.parametrize("max_tokens", [5, 40])  # 40: past generate's default max_length 20
def test_max_tokens_ends_with_length(backend: TransformersBackend, max_tokens: int) -> None:
    for cand in backend.generate(PROMPT, n=2, max_tokens=max_tokens, seed=1):
        assert cand.finish_reason == "length" and len(cand.token_ids) == max_tokens


def test_prompt_as_ids_equals_prompt_as_text(backend: TransformersBackend) -> None:
    as_text = backend.generate(PROMPT, n=2, max_tokens=8, seed=4)
    assert backend.generate(backend.tokenize(PROMPT), n=2, max_tokens=8, seed=4) == as_text


def _clean_stop(backend: TransformersBackend, tokens: list[int]) -> tuple[str, int, int]:
    """A stop string made of two generated tokens whose text first occurs there."""
    full = backend._decode(tokens)
    for k in range(2, len(tokens) - 2):
        stop = backend._decode(tokens[k : k + 2])
        where = len(backend._decode(tokens[:k]))
        if len(stop.strip()) >= 2 and "\ufffd" not in full and full.find(stop) == where:
            return stop, k + 2, where
    raise AssertionError(f"no usable stop string in {full!r}")


def test_stop_string_ends_the_text_but_not_the_ids(backend: TransformersBackend) -> None:
    for seed in range(20):
        free = backend.generate(PROMPT, max_tokens=20, seed=seed)[0]
        if "\ufffd" not in free.text:
            break
    stop, keep, where = _clean_stop(backend, free.token_ids)
    cut = backend.generate(PROMPT, max_tokens=20, seed=seed, stop=["#never#", stop])[0]
    assert cut.finish_reason == "stop"
    assert cut.text == free.text[:where] and stop not in cut.text
    assert cut.token_ids == free.token_ids[:keep]
    assert cut.logprobs == free.logprobs[:keep]


def test_stop_strings_apply_per_candidate(backend: TransformersBackend) -> None:
    free = backend.generate(PROMPT, n=6, max_tokens=16, seed=8)
    stop = backend._decode(free[2].token_ids[5:7])  # ends candidate 2 at token 7 or earlier
    cut = backend.generate(PROMPT, n=6, max_tokens=16, seed=8, stop=[stop])
    for whole, part in zip(free, cut, strict=True):
        assert whole.token_ids[: len(part.token_ids)] == part.token_ids
        assert stop not in part.text
        if part.finish_reason == "stop":
            assert stop in backend._decode(part.token_ids)
            assert stop not in backend._decode(part.token_ids[:-1])  # the last token ended it
        else:
            # a row that leaves the batch changes the others' float32 sums in the last bits
            same = (part.text, part.token_ids, part.finish_reason)
            assert same == (whole.text, whole.token_ids, whole.finish_reason)
            assert part.logprobs == pytest.approx(whole.logprobs, abs=1e-5)
    assert cut[2].finish_reason == "stop" and len(cut[2].token_ids) <= 7


def test_end_of_sequence_ends_with_stop(tiny_model_dir: Path, tmp_path: Path) -> None:
    """A checkpoint may name several eos ids in generation_config.json (Qwen2.5 names
    two): make a token a seeded sample reaches one of them, and generation ends there."""
    plain = TransformersBackend(str(tiny_model_dir))
    free = plain.generate(PROMPT, max_tokens=12, seed=2)[0]
    plain.close()
    k = next(i for i in range(2, 12) if free.token_ids[i] not in free.token_ids[:i])
    variant = tmp_path / "eos-variant"
    shutil.copytree(tiny_model_dir, variant)
    generation = json.loads((variant / "generation_config.json").read_text())
    generation["eos_token_id"] = [generation["eos_token_id"], free.token_ids[k]]
    (variant / "generation_config.json").write_text(json.dumps(generation))

    stopped = TransformersBackend(str(variant)).generate(PROMPT, max_tokens=12, seed=2)[0]
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[: k + 1]  # the eos token is kept ...
    assert stopped.text == plain._decode(free.token_ids[:k])  # ... but not in the text


def test_context_overflow_is_refused_before_generating(backend: TransformersBackend) -> None:
    long_prompt = [100] * (backend.context_length - 4)
    with pytest.raises(ContextOverflowError, match=f"{backend.context_length - 4} tokens"):
        backend.generate(long_prompt, max_tokens=5)
    assert len(backend.generate(long_prompt, max_tokens=4, seed=0)[0].token_ids) <= 4
    with pytest.raises(ContextOverflowError):
        backend.score_yes_no(["ok", "yes " * (backend.context_length + 1000)])


def test_concurrent_callers_get_what_they_would_alone(backend: TransformersBackend) -> None:
    alone = [backend.generate(PROMPT, n=2, max_tokens=6, seed=s) for s in range(4)]
    together: dict[int, list[Candidate]] = {}

    def run(seed: int) -> None:
        together[seed] = backend.generate(PROMPT, n=2, max_tokens=6, seed=seed)

    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [together[s] for s in range(4)] == alone


# ---- score_yes_no --------------------------------------------------------------------


def test_score_yes_no_batched_equals_one_by_one(backend: TransformersBackend) -> None:
    batched = backend.score_yes_no(QUESTIONS)
    alone = [backend.score_yes_no([q])[0] for q in QUESTIONS]
    assert batched == pytest.approx(alone, abs=1e-5)
    assert len(set(batched)) == len(QUESTIONS)
    assert backend.score_yes_no([]) == []


def test_score_yes_no_equals_a_hand_computation(backend: TransformersBackend) -> None:
    import torch

    spellings: dict[str, list[int]] = {}
    for answer in ("yes", "no"):
        words = [
            w for base in (answer, answer.capitalize(), answer.upper()) for w in (base, " " + base)
        ]
        spellings[answer] = [backend.tokenize(w)[0] for w in words]
        assert all(len(backend.tokenize(w)) == 1 for w in words)
    for question, score in zip(QUESTIONS, backend.score_yes_no(QUESTIONS), strict=True):
        with torch.inference_mode():
            logits = backend._base(torch.tensor([backend.tokenize(question)])).logits[0, -1]
        logprobs = logits.double().log_softmax(-1)
        expected = logsumexp([float(logprobs[i]) for i in spellings["yes"]]) - logsumexp(
            [float(logprobs[i]) for i in spellings["no"]]
        )
        assert score == pytest.approx(expected, abs=1e-5)


# ---- the kept prompt -----------------------------------------------------------------


def encoded_lengths(backend: TransformersBackend) -> list[int]:
    """How many tokens each later forward pass encodes (a hook on the embedding layer,
    which every pass goes through, with or without peft around the model)."""
    lengths: list[int] = []
    embed = backend._base.get_input_embeddings()
    embed.register_forward_pre_hook(lambda _module, args: lengths.append(args[0].shape[-1]))
    return lengths


def test_a_prompt_that_extends_the_last_encodes_only_what_follows(
    fresh: TransformersBackend,
) -> None:
    """A block's questions and the next block's prompt start with the block's prompt:
    only their new tokens are encoded, and what comes out is what a cold start gives."""
    lengths = encoded_lengths(fresh)
    prompt = fresh.tokenize(PROMPT)
    block = fresh.generate(prompt, max_tokens=6, temperature=0)[0]
    assert lengths[0] == len(prompt)
    question = PROMPT + fresh._decode(block.token_ids) + "\n#q: Does it run?"
    asked = fresh.tokenize(question)
    assert asked[: len(prompt)] == prompt
    lengths.clear()
    warm = fresh.score_yes_no([question])
    assert lengths == [len(asked) - len(prompt)]
    # the next prompt: the block and what followed it
    following = asked + fresh.tokenize("\nok\n")
    lengths.clear()
    warm_next = fresh.generate(following, n=3, max_tokens=8, seed=4)
    assert lengths[0] == len(following) - len(prompt)

    fresh._prompt_cache = None  # a cold start: everything encoded again
    lengths.clear()
    assert fresh.score_yes_no([question]) == pytest.approx(warm, abs=1e-5)
    assert lengths == [len(asked)]
    cold_next = fresh.generate(following, n=3, max_tokens=8, seed=4)
    for hot, cold in zip(warm_next, cold_next, strict=True):
        assert hot.logprobs == pytest.approx(cold.logprobs, abs=1e-4)
    # the same prompt again: nothing to encode before the first sampled token
    lengths.clear()
    again = fresh.generate(following, n=3, max_tokens=8, seed=4)
    assert again == cold_next and lengths[0] == 1
    fresh.keep_prompt = False  # off: every prompt encoded whole
    lengths.clear()
    fresh.generate(following, max_tokens=1)
    assert lengths == [len(following)]


def shared_start(a: list[int], b: list[int]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def test_a_prompt_that_shares_the_start_of_the_last_encodes_only_the_rest(
    fresh: TransformersBackend,
) -> None:
    """The last prompt's cache is cut back to what the next one shares with it (an
    earlier block's prompt, a rewritten last turn): the rest is encoded, and the scores
    are a cold start's."""
    lengths = encoded_lengths(fresh)
    shared = PROMPT * 4
    first = fresh.tokenize(shared + "    return 1\n")
    fresh.generate(first, max_tokens=2, temperature=0)
    others = [shared + "    x = 2\n#q: Is it two?", shared[:-3]]
    encoded = [fresh.tokenize(other) for other in others]
    # what each shares with the kept prompt, one token left to encode where it is all
    common = [min(shared_start(first, ids), len(ids) - 1) for ids in encoded]
    assert min(common) >= 32 and common[1] == len(encoded[1]) - 1
    lengths.clear()
    warm = [fresh.score_yes_no([other])[0] for other in others]
    assert lengths == [len(ids) - n for ids, n in zip(encoded, common, strict=True)]
    assert lengths[0] < len(encoded[0]) // 4
    fresh._prompt_cache = None
    assert [fresh.score_yes_no([other])[0] for other in others] == pytest.approx(warm, abs=1e-5)


def test_a_kept_prompt_is_not_reused_under_another_adapter(
    fresh: TransformersBackend, tiny_adapter_dir: Path
) -> None:
    base = greedy(fresh)
    fresh.load_adapter("one", str(tiny_adapter_dir))
    fresh.use_adapter("one")
    lengths = encoded_lengths(fresh)
    one = greedy(fresh)
    assert lengths[0] == len(fresh.tokenize(PROMPT)) and one.token_ids != base.token_ids
    fresh.use_adapter(None)
    lengths.clear()
    assert greedy(fresh) == base and lengths[0] == len(fresh.tokenize(PROMPT))


# ---- adapters --------------------------------------------------------------------------


def greedy(backend: TransformersBackend) -> Candidate:
    return backend.generate(PROMPT, max_tokens=12, temperature=0)[0]


def test_adapters_change_outputs_and_switch_without_reloading(
    fresh: TransformersBackend, tiny_adapter_dir: Path, tiny_adapter2_dir: Path
) -> None:
    base = greedy(fresh)
    base_scores = fresh.score_yes_no(QUESTIONS)

    fresh.load_adapter("one", str(tiny_adapter_dir))
    assert fresh.adapters() == ["one"] and fresh.active_adapter is None
    assert greedy(fresh) == base  # loading does not switch

    fresh.use_adapter("one")
    one = greedy(fresh)
    assert fresh.active_adapter == "one" and one.token_ids != base.token_ids
    assert fresh.score_yes_no(QUESTIONS) != pytest.approx(base_scores, abs=1e-3)

    fresh.load_adapter("two", str(tiny_adapter2_dir))
    assert fresh.active_adapter == "one" and greedy(fresh) == one
    fresh.use_adapter("two")
    two = greedy(fresh)
    assert two.token_ids not in (one.token_ids, base.token_ids)

    fresh.use_adapter(None)
    assert greedy(fresh) == base
    assert fresh.score_yes_no(QUESTIONS) == pytest.approx(base_scores, abs=1e-6)
    fresh.use_adapter("one")
    assert greedy(fresh) == one
    assert sorted(fresh.adapters()) == ["one", "two"]

    with pytest.raises(AdapterError, match="unknown adapter 'three'"):
        fresh.use_adapter("three")
    with pytest.raises(AdapterError, match="already loaded"):
        fresh.load_adapter("one", str(tiny_adapter2_dir))
    assert fresh.active_adapter == "one"


def _incompatible_adapters(adapter: Path, tmp_path: Path) -> list[Path]:
    """Two real adapter folders that cannot fit the tiny model: one for other layer
    names, one with the wrong shapes (as if trained on a bigger model)."""
    import torch
    from safetensors.torch import load_file, save_file

    other_layers = tmp_path / "other-layers"
    shutil.copytree(adapter, other_layers)
    config = json.loads((other_layers / "adapter_config.json").read_text())
    config["target_modules"] = ["c_attn", "c_proj"]
    (other_layers / "adapter_config.json").write_text(json.dumps(config))

    wrong_shapes = tmp_path / "wrong-shapes"
    shutil.copytree(adapter, wrong_shapes)
    weights = load_file(str(wrong_shapes / "adapter_model.safetensors"))
    bigger = {k: torch.zeros(v.shape[0] * 2, v.shape[1] * 2) for k, v in weights.items()}
    save_file(bigger, str(wrong_shapes / "adapter_model.safetensors"))
    return [other_layers, wrong_shapes]


def test_a_closed_backend_refuses_work(tiny_model_dir: Path) -> None:
    closed = TransformersBackend(str(tiny_model_dir))
    closed.close()
    with pytest.raises(BackendError, match="closed"):
        closed.generate(PROMPT, max_tokens=2)


def test_bad_arguments_are_refused(backend: TransformersBackend) -> None:
    for bad in ({"n": 0}, {"max_tokens": 0}, {"temperature": -1.0}):
        with pytest.raises(BackendError):
            backend.generate(PROMPT, **bad)  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="empty"):
        backend.generate("")
    with pytest.raises(BackendError, match="vocabulary"):
        backend.generate([1, 10**7])


def test_bad_adapters_are_refused_and_leave_the_model_as_it_was(
    fresh: TransformersBackend, tiny_adapter_dir: Path, tmp_path: Path
) -> None:
    base = greedy(fresh)
    not_lora = tmp_path / "not-lora"
    not_lora.mkdir()
    (not_lora / "adapter_config.json").write_text('{"peft_type": "PROMPT_TUNING"}')
    for bad, match in [
        (tmp_path / "missing", "no such folder"),
        (tmp_path, "no adapter_config.json"),
        (not_lora, "only LoRA"),
    ]:
        with pytest.raises(AdapterError, match=match):
            fresh.load_adapter("bad", str(bad))
    incompatible = _incompatible_adapters(tiny_adapter_dir, tmp_path)
    for bad in incompatible:  # as the first adapter: peft wraps the model, then fails
        with pytest.raises(AdapterError, match="does not fit") as caught:
            fresh.load_adapter("bad", str(bad))
        assert "\n" not in str(caught.value)
        assert fresh.adapters() == [] and greedy(fresh) == base

    fresh.load_adapter("good", str(tiny_adapter_dir))
    fresh.use_adapter("good")
    good = greedy(fresh)
    for bad in incompatible:  # beside a loaded adapter
        with pytest.raises(AdapterError, match="does not fit"):
            fresh.load_adapter("bad", str(bad))
        assert fresh.adapters() == ["good"] and fresh.active_adapter == "good"
        assert greedy(fresh) == good
    fresh.use_adapter(None)
    assert greedy(fresh) == base
    fresh.load_adapter("bad", str(tiny_adapter_dir))  # the failed name is free again


def test_a_feature_the_backend_lacks_is_refused_by_name(backend: TransformersBackend) -> None:
    """`Backend.generate` checks each request against `features` for every backend: what
    the backend cannot do is refused in one line naming it, never ignored."""
    backend.features = frozenset({"stream"})
    try:
        with pytest.raises(BackendError, match=r"cannot follow a grammar or ban repeats$"):
            backend.generate(PROMPT, max_tokens=2, grammar='root ::= "a"', no_repeat=2)
        pieces: list[tuple[int, str]] = []
        greedy = backend.generate(
            PROMPT, n=3, max_tokens=3, temperature=0, on_token=lambda i, p: pieces.append((i, p))
        )
    finally:
        del backend.features
    assert backend.features == frozenset({"grammar", "stream", "no-repeat"})
    # greedy: one sequence, given three times, every piece streamed to each of them
    assert len({c.text for c in greedy}) == 1
    for row in range(3):
        assert "".join(p for i, p in pieces if i == row) == greedy[0].text
