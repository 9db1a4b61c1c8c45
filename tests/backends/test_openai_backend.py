"""The openai backend against a real vLLM server (CPU) serving the tiny model.

The server is the suite's shared one (tests/conftest.py, started once, ~25-40 s). A server
SIGKILLed mid-request (the caller gets ServerUnreachableError within seconds, not a hang
until the timeout) is tests/reliability/test_backend_death.py, end to end through
`agent-console --query`, with a server of its own. The reference for
every number is the same tiny model run in process by transformers (TransformersBackend
or a plain forward pass). Skips without `.venv-vllm` (`make vllm`), unless
AGENT_CONSOLE_REQUIRE_VLLM=1 (CI), where that is a failure.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agents.backends.base import (
    AdapterError,
    Candidate,
    ContextOverflowError,
    ModelNotFoundError,
    ServerUnreachableError,
)
from agents.backends.openai_backend import OpenAIBackend
from tests.backends.vllm_server import (
    REPO_ROOT,
    SERVED_NAME,
    SHARED_MAX_MODEL_LEN,
    VLLMServer,
    free_port,
)

#: Mixed scripts and whitespace runs that Qwen2's split regex treats specially.
MIXED_TEXT = (
    "def f(x):\n\tif x:\n\t\treturn  'Καλημέρα κόσμε'   \r\n\n\n"
    "    Привет, мир!  你好世界 日本語テキスト 한국어\u00a0text  \t \n"
    "e\u0301t\u00e9 NFC  123456789  yes Yes  NO\n\n  #q: ok?   "
)

QUESTION = "\n#q: Is this action likely to make progress on the task?"


def _prompts(count: int) -> list[str]:
    """Candidate-like prompts: a shared context, a different block each, the question."""
    context = "#startblock type: orientation\nThe agent reads notes.txt and plans.\n#endblock\n"
    blocks = [
        f"#startblock type: action\ndef action_{i}(subagent):\n    return {i} * {i + 3}\n"
        f"self.add_action('step {i}', action_{i})\n#endblock"
        for i in range(count)
    ]
    return [context + block + QUESTION for block in blocks]


# ------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def backend(vllm_server: VLLMServer) -> Iterator[OpenAIBackend]:
    opened = OpenAIBackend(vllm_server.base_url, SERVED_NAME, timeout=60)
    yield opened
    opened.close()


@pytest.fixture(scope="module")
def reference(tiny_model_dir: Path) -> Iterator[Any]:
    """The same model in process: the numbers the server must reproduce."""
    from agents.backends.transformers_backend import TransformersBackend

    loaded = TransformersBackend(str(tiny_model_dir), device="cpu", dtype="float32")
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_model_dir: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def hf_model(tiny_model_dir: Path) -> Any:
    """The tiny model as plain transformers, for forward passes."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def _next_token_logprobs(model: Any, ids: list[int]) -> Any:
    """log softmax of the logits at every position of `ids` (one forward pass)."""
    import torch

    with torch.inference_mode():
        return model(input_ids=torch.tensor([ids])).logits[0].float().log_softmax(dim=-1)


def _forward_logprobs(
    model: Any, prompt: list[int], completion: list[int], temperature: float
) -> list[float]:
    """log softmax(logits / T) of each completion token, from one transformers forward
    pass over prompt + completion (T=1 for greedy, as base.py specifies)."""
    import torch

    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0].float()
    scale = temperature if temperature > 0 else 1.0
    steps = (logits[len(prompt) - 1 : -1] / scale).log_softmax(dim=-1)
    return [float(steps[i, token]) for i, token in enumerate(completion)]


def _completion_requests(server: VLLMServer) -> float:
    """How many /v1/completions requests the server has answered (its own metrics)."""
    with urllib.request.urlopen(f"{server.root_url}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    pattern = re.compile(
        r'^http_requests_total\{[^}]*handler="/v1/completions"[^}]*\} (\S+)$', re.M
    )
    return sum(float(value) for value in pattern.findall(text))


def _check_candidate(candidate: Candidate, max_tokens: int) -> None:
    assert len(candidate.token_ids) == len(candidate.logprobs) >= 1
    assert all(math.isfinite(lp) and lp <= 0 for lp in candidate.logprobs)
    assert candidate.finish_reason in ("stop", "length")
    if candidate.finish_reason == "length":
        assert len(candidate.token_ids) == max_tokens
    else:
        assert len(candidate.token_ids) <= max_tokens


# ---------------------------------------------------------------------------- tests


def test_import_loads_neither_torch_nor_transformers_nor_openai() -> None:
    code = (
        "import json, sys; import agents.backends.openai_backend; "
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in {'torch', 'transformers', 'openai'})))"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_model_list_gives_context_length_and_default_model(vllm_server: VLLMServer) -> None:
    # A bare host URL gets /v1; an empty model name picks the served base model.
    opened = OpenAIBackend(vllm_server.root_url, "")
    try:
        assert opened.model == SERVED_NAME
        assert opened.base_url == vllm_server.base_url
        assert opened.context_length == SHARED_MAX_MODEL_LEN
    finally:
        opened.close()


def test_unknown_model_is_model_not_found(vllm_server: VLLMServer) -> None:
    with pytest.raises(ModelNotFoundError, match=r"does not serve 'nope'.*tiny"):
        OpenAIBackend(vllm_server.base_url, "nope")


def test_n_candidates_carry_token_ids_logprobs_and_finish_reasons(
    backend: OpenAIBackend, hf_tokenizer: Any
) -> None:
    candidates = backend.generate("The agent writes", n=6, max_tokens=12, temperature=1.0, seed=7)
    assert len(candidates) == 6
    for candidate in candidates:
        _check_candidate(candidate, 12)
        assert all(0 <= t < len(hf_tokenizer) for t in candidate.token_ids)
        if candidate.finish_reason == "length":
            assert candidate.text == hf_tokenizer.decode(
                candidate.token_ids, skip_special_tokens=True
            )
    assert len({tuple(c.token_ids) for c in candidates}) > 1, "six samples, all identical"
    # The same seed gives the same candidates.
    again = backend.generate("The agent writes", n=6, max_tokens=12, temperature=1.0, seed=7)
    assert [c.token_ids for c in again] == [c.token_ids for c in candidates]


def test_greedy_candidates_repeat_one_sequence(backend: OpenAIBackend) -> None:
    # vLLM refuses n > 1 when greedy; the backend asks once and repeats it.
    candidates = backend.generate("The agent writes", n=3, max_tokens=8, temperature=0.0)
    assert len(candidates) == 3
    assert candidates[0] == candidates[1] == candidates[2]
    _check_candidate(candidates[0], 8)


def test_end_of_sequence_finishes_with_stop(
    backend: OpenAIBackend, hf_tokenizer: Any, hf_model: Any
) -> None:
    """Where the model's most likely next token is <|im_end|>, greedy decoding ends there:
    finish "stop", the eos token kept as the last token, no text."""
    eos = hf_tokenizer.convert_tokens_to_ids("<|im_end|>")
    prompt = _prompt_before_eos(hf_model, hf_tokenizer, eos)
    candidate = backend.generate(prompt, max_tokens=8, temperature=0.0)[0]
    assert candidate.finish_reason == "stop"
    assert candidate.token_ids == [eos]
    assert candidate.text == ""
    _check_candidate(candidate, 8)


def _prompt_before_eos(model: Any, tokenizer: Any, eos: int) -> list[int]:
    """A prompt after which transformers ranks eos first by a clear margin. The random
    tiny model (tied embeddings) tends to repeat its last token, so prompts ending in
    eos are tried."""
    texts = ["#endblock", "The agent", "yes", "Hello there", "no", "#q: ok?", "x = 1", ""]
    for text in texts:
        for repeat in (1, 2, 3):
            ids = tokenizer.encode(text, add_special_tokens=False) + [eos] * repeat
            top = _next_token_logprobs(model, ids)[-1].topk(2)
            if int(top.indices[0]) == eos and float(top.values[0] - top.values[1]) > 0.02:
                return ids
    raise AssertionError("no test prompt makes the tiny model predict eos: extend the list")


def test_stop_strings_cut_the_text_and_keep_the_tokens(
    backend: OpenAIBackend, hf_tokenizer: Any
) -> None:
    prompt = "Hello there"
    full = backend.generate(prompt, max_tokens=24, temperature=0.0)[0]
    cut, stop = _first_occurrence_cut(full.text)
    stopped = backend.generate(prompt, max_tokens=24, temperature=0.0, stop=["\x00never", stop])[0]
    assert stopped.finish_reason == "stop"
    assert stopped.text == full.text[:cut]
    # The tokens that spelled the stop string are kept, as vLLM and base.py do.
    assert stopped.token_ids == full.token_ids[: len(stopped.token_ids)]
    assert hf_tokenizer.decode(stopped.token_ids).startswith(full.text[:cut] + stop)
    assert stopped.logprobs == pytest.approx(full.logprobs[: len(stopped.logprobs)], abs=1e-4)


def _first_occurrence_cut(text: str) -> tuple[int, str]:
    """A two-character stop string and where it first occurs in `text`, past a third of
    it if possible (whatever the tiny model's greedy output happens to be)."""
    starts = [*range(len(text) // 3, len(text) - 1), *range(1, len(text) // 3)]
    for at in starts:
        stop = text[at : at + 2]
        if "\ufffd" not in stop and stop.strip() and text.find(stop) == at:
            return at, stop
    raise AssertionError(f"no usable stop string in the greedy output {text!r}")


def test_score_yes_no_is_one_request_and_agrees_with_transformers(
    backend: OpenAIBackend, reference: Any, vllm_server: VLLMServer
) -> None:
    prompts = _prompts(16)
    backend.score_yes_no(prompts[:1])  # the yes/no ids are looked up once, before counting
    before = _completion_requests(vllm_server)
    scores = backend.score_yes_no(prompts)
    assert _completion_requests(vllm_server) - before == 1
    expected = reference.score_yes_no(prompts)
    assert len(scores) == 16
    assert all(math.isfinite(s) for s in scores)
    assert scores == pytest.approx(expected, abs=1e-2)
    assert len({round(s, 4) for s in scores}) > 1, "every prompt scored the same"
    assert backend.score_yes_no([]) == []


def test_server_tokenizer_agrees_with_hf_tokenizer(
    backend: OpenAIBackend, hf_tokenizer: Any, tiny_model_dir: Path, vllm_server: VLLMServer
) -> None:
    expected = hf_tokenizer.encode(MIXED_TEXT, add_special_tokens=False)
    assert backend.tokenize(MIXED_TEXT) == expected
    local = OpenAIBackend(vllm_server.base_url, SERVED_NAME, tokenizer=str(tiny_model_dir))
    try:
        assert local.tokenize(MIXED_TEXT) == expected
    finally:
        local.close()
    # Token ids sent as the prompt are what the model sees: generation from the text and
    # from its ids is the same.
    from_text = backend.generate(MIXED_TEXT, max_tokens=6, temperature=0.0)[0]
    from_ids = backend.generate(expected, max_tokens=6, temperature=0.0)[0]
    assert from_text == from_ids


def test_render_chat_uses_the_models_template(
    backend: OpenAIBackend, hf_tokenizer: Any, tiny_model_dir: Path, vllm_server: VLLMServer
) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say  yes\tor no: 你好?"},
    ]
    for add in (True, False):
        expected = hf_tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add
        )
        assert backend.render_chat(messages, add_generation_prompt=add) == expected
    local = OpenAIBackend(vllm_server.base_url, SERVED_NAME, tokenizer=str(tiny_model_dir))
    try:
        assert local.render_chat(messages) == backend.render_chat(messages)
    finally:
        local.close()


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_sampled_logprobs_match_a_transformers_forward_pass(
    backend: OpenAIBackend, hf_model: Any, temperature: float
) -> None:
    prompt = backend.tokenize("#startblock type: action\nThe agent")
    candidates = backend.generate(prompt, n=3, max_tokens=16, temperature=temperature, seed=11)
    for candidate in candidates:
        expected = _forward_logprobs(hf_model, prompt, candidate.token_ids, temperature)
        assert candidate.logprobs == pytest.approx(expected, abs=1e-2)


def test_chat_mode_generates_and_scores_like_the_rendered_prompt(
    backend: OpenAIBackend, vllm_server: VLLMServer
) -> None:
    chat = OpenAIBackend(vllm_server.base_url, SERVED_NAME, api="chat")
    try:
        sampled = chat.generate("Hello there", n=3, max_tokens=10, temperature=0.9, seed=5)
        assert len(sampled) == 3
        for candidate in sampled:
            _check_candidate(candidate, 10)
        # Chat mode sends the prompt as one user message: the same as completing the
        # chat-rendered prompt.
        greedy = chat.generate("Hello there", max_tokens=10, temperature=0.0)[0]
        rendered = backend.render_chat([{"role": "user", "content": "Hello there"}])
        direct = backend.generate(rendered, max_tokens=10, temperature=0.0)[0]
        assert greedy.token_ids == direct.token_ids
        assert greedy.text == direct.text
        assert greedy.logprobs == pytest.approx(direct.logprobs, abs=1e-4)
        prompts = _prompts(3)
        chat_scores = chat.score_yes_no(prompts)
        wrapped = [backend.render_chat([{"role": "user", "content": p}]) for p in prompts]
        assert chat_scores == pytest.approx(backend.score_yes_no(wrapped), abs=1e-3)
    finally:
        chat.close()


def test_lora_adapter_loaded_at_run_time_is_used(
    backend: OpenAIBackend, reference: Any, tiny_adapter_dir: Path
) -> None:
    prompt = "#startblock type: action\ndef action_check(subagent):\n"
    base = backend.generate(prompt, max_tokens=12, temperature=0.0)[0]
    backend.load_adapter("a1", str(tiny_adapter_dir))
    assert "a1" in backend.adapters()
    assert backend.active_adapter is None  # loading does not switch
    assert backend.generate(prompt, max_tokens=12, temperature=0.0)[0] == base
    try:
        backend.use_adapter("a1")
        assert backend.active_adapter == "a1"
        tuned = backend.generate(prompt, max_tokens=12, temperature=0.0)[0]
        assert tuned.token_ids != base.token_ids
        # The server applies the adapter as peft does in process.
        reference.load_adapter("a1", str(tiny_adapter_dir))
        reference.use_adapter("a1")
        prompts = _prompts(4)
        assert backend.score_yes_no(prompts) == pytest.approx(
            reference.score_yes_no(prompts), abs=1e-2
        )
    finally:
        backend.use_adapter(None)
        reference.use_adapter(None)
    assert backend.active_adapter is None
    assert backend.generate(prompt, max_tokens=12, temperature=0.0)[0] == base


def test_adapter_errors(backend: OpenAIBackend, tmp_path: Path) -> None:
    with pytest.raises(AdapterError, match="no adapter named 'ghost'"):
        backend.use_adapter("ghost")
    with pytest.raises(AdapterError, match="cannot load adapter 'broken'"):
        backend.load_adapter("broken", str(tmp_path / "missing"))
    assert "broken" not in backend.adapters()
    assert backend.active_adapter is None


def test_prompt_longer_than_the_context_is_context_overflow(backend: OpenAIBackend) -> None:
    ids = backend.tokenize("yes no " * SHARED_MAX_MODEL_LEN)[: SHARED_MAX_MODEL_LEN - 100]
    with pytest.raises(ContextOverflowError):  # checked here: the prompt + 300 new > the context
        backend.generate(ids, max_tokens=300)
    with pytest.raises(ContextOverflowError, match="maximum context length"):  # by the server
        backend.score_yes_no(["yes no " * SHARED_MAX_MODEL_LEN])


def test_closed_port_is_unreachable_after_retries_in_bounded_time() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/v1"
    start = time.monotonic()
    with pytest.raises(ServerUnreachableError, match=re.escape(url)) as raised:
        OpenAIBackend(url, SERVED_NAME, max_retries=2, timeout=5)
    elapsed = time.monotonic() - start
    assert "cannot reach the model server" in str(raised.value)
    assert "3 attempts" in str(raised.value)
    assert 1.4 <= elapsed < 10, elapsed  # backoff 0.5 s + 1 s between the three attempts
