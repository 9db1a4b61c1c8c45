"""The offline model, Gemma 3 270M base, served by vLLM on CPU with `agent-console serve`'s
command line (agents/backends/serving.py), used through the openai backend: sampling, yes/no
scoring and a LoRA adapter loaded at run time.

Gemma needs its `<bos>` in front of every prompt or it writes garbage; the backend learns
that from the server's tokenizer and adds it, to generation and scoring alike. The numbers
are checked against the same folder run in this process by transformers, with the `<bos>`
put in by hand, and the adapter's against peft.

The folder is tests/conftest.py's `gemma_dir` (converted once, ~1 min, then reused). One
server for the module, context 1024: about two minutes in all on two busy cores, most of it
vLLM starting. Skips without `.venv-vllm` (`make vllm`), unless AGENT_CONSOLE_REQUIRE_VLLM=1
(CI), where that is a failure.
"""

from __future__ import annotations

import contextlib
import json
import math
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agents.backends.base import log_odds, yes_no_token_ids
from agents.backends.openai_backend import OpenAIBackend
from tests.backends.vllm_server import VLLMServer, start_vllm_server, vllm_python_or_skip

pytestmark = [pytest.mark.server, pytest.mark.real, pytest.mark.slow]

SERVED = "gemma"
FIBONACCI = "def fibonacci(n):"
#: A few answered lines, then questions the context answers: the base model copies the
#: pattern (it knows few facts, but it can read).
CALIBRATION = (
    "The box is red. Is the box red? Yes.\n"
    "The cup is blue. Is the cup green? No.\n"
    "The cat is black. Is the cat black? Yes.\n"
    "The car is white. Is the car red? No.\n"
)
YES_QUESTION = CALIBRATION + "The hat is blue. Is the hat blue?"
NO_QUESTION = CALIBRATION + "The hat is blue. Is the hat yellow?"
QUESTIONS = [YES_QUESTION, NO_QUESTION, "#q: Is Paris the capital of France?"]
LORA_RANK = 8


@pytest.fixture(scope="module")
def served(
    gemma_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[VLLMServer, dict[str, Any]]]:
    """One server for the module, and the reference numbers, made while it starts."""
    vllm_python_or_skip()
    work = tmp_path_factory.mktemp("vllm-gemma")
    with ThreadPoolExecutor(max_workers=1) as pool:
        starting = pool.submit(_start_and_warm, gemma_dir, work)
        try:
            numbers = _reference(gemma_dir, tmp_path_factory.mktemp("gemma-adapter"))
        except BaseException:
            with contextlib.suppress(Exception):
                starting.result().stop()
            raise
        server = starting.result()
    try:
        yield server, numbers
    finally:
        server.stop()


@pytest.fixture(scope="module")
def reference(served: tuple[VLLMServer, dict[str, Any]]) -> dict[str, Any]:
    return served[1]


@pytest.fixture(scope="module")
def backend(served: tuple[VLLMServer, dict[str, Any]]) -> Iterator[OpenAIBackend]:
    opened = OpenAIBackend(served[0].base_url, SERVED, timeout=300)
    yield opened
    opened.close()


def _start_and_warm(gemma_dir: Path, work: Path) -> VLLMServer:
    """A started server that has answered once: vLLM on CPU takes ~20 s over the first
    request that asks for logprobs (made on first use), time spent here while the
    reference is built."""
    server = start_vllm_server(
        gemma_dir, work, served_name=SERVED, max_model_len=1024, startup_timeout=600.0
    )
    try:
        body = {"model": SERVED, "prompt": [2, 1293], "max_tokens": 2, "logprobs": 0}
        request = urllib.request.Request(
            f"{server.base_url}/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=300) as reply:
            reply.read()
    except BaseException:
        server.stop()
        raise
    return server


def _reference(gemma_dir: Path, adapter_root: Path) -> dict[str, Any]:
    """The scores transformers gives for QUESTIONS (with `<bos>`, and without it, to show
    that it matters), then a random-init LoRA adapter (q_proj, v_proj) saved by peft, and
    the scores with it applied."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gemma_dir)
    model = AutoModelForCausalLM.from_pretrained(gemma_dir, dtype=torch.float32).eval()
    yes, no = yes_no_token_ids(lambda text: tokenizer.encode(text, add_special_tokens=False))

    def scores(net: Any, *, bos: bool = True) -> list[float]:
        out = []
        for prompt in QUESTIONS:
            ids = tokenizer.encode(prompt, add_special_tokens=False)
            ids = [tokenizer.bos_token_id, *ids] if bos else ids
            with torch.no_grad():
                logits = net(torch.tensor([ids]), logits_to_keep=1).logits[0, -1]
            logprobs = torch.log_softmax(logits.float(), dim=-1)
            out.append(log_odds(logprobs[yes].tolist(), logprobs[no].tolist()))
        return out

    result: dict[str, Any] = {"base": scores(model), "base_without_bos": scores(model, bos=False)}
    lora = LoraConfig(
        r=LORA_RANK,
        lora_alpha=2 * LORA_RANK,
        lora_dropout=0.0,
        target_modules=["q_proj", "v_proj"],
        task_type="CAUSAL_LM",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        peft_model = get_peft_model(model, lora)
        with torch.no_grad():  # peft starts B at zero, an adapter that changes nothing
            for name, param in peft_model.named_parameters():
                if "lora_A" in name or "lora_B" in name:
                    param.normal_(0.0, 0.05)
    folder = adapter_root / "random"
    peft_model.save_pretrained(str(folder), safe_serialization=True)
    result["adapter_dir"] = folder
    result["adapter"] = scores(peft_model.eval())
    return result


def test_greedy_continuation_is_python_from_text_or_ids(backend: OpenAIBackend) -> None:
    candidates = backend.generate(FIBONACCI, n=4, max_tokens=48, temperature=0.0, stop=["elif"])
    assert len(candidates) == 4
    text = candidates[0].text
    assert "return" in text and "elif" not in text, text  # without <bos>: "<h2><h2>..."
    assert candidates[0].finish_reason == "stop"
    # Token ids as the backend tokenizes them (no special tokens) get the <bos> too.
    from_ids = backend.generate(backend.tokenize(FIBONACCI), max_tokens=8, temperature=0.0)
    assert from_ids[0].token_ids == candidates[0].token_ids[:8]


def test_four_sampled_candidates_stop_at_their_stop_strings(backend: OpenAIBackend) -> None:
    candidates = backend.generate(
        FIBONACCI, n=4, max_tokens=48, temperature=0.8, seed=7, stop=["\n\n", "\ndef "]
    )
    assert len(candidates) == 4
    assert len({c.text for c in candidates}) > 1
    for candidate in candidates:
        assert "\n\n" not in candidate.text and "\ndef " not in candidate.text
        assert len(candidate.token_ids) == len(candidate.logprobs) > 0
        assert all(-math.inf < value <= 0 for value in candidate.logprobs)
        if candidate.finish_reason == "length":
            assert len(candidate.token_ids) == 48


def test_yes_no_scores_match_transformers_with_bos(
    backend: OpenAIBackend, reference: dict[str, Any]
) -> None:
    scores = backend.score_yes_no(QUESTIONS)
    assert all(math.isfinite(score) for score in scores)
    yes, no, _ = scores
    assert yes > 0 > no, scores
    assert scores == pytest.approx(reference["base"], abs=1e-2)
    # The check would catch a missing <bos>: without it the numbers are others.
    assert max(abs(a - b) for a, b in zip(scores, reference["base_without_bos"], strict=True)) > 0.1
    # A prompt that starts with <bos> already does not get a second one.
    assert backend.score_yes_no(["<bos>" + YES_QUESTION])[0] == pytest.approx(yes, abs=1e-3)


def test_an_adapter_loaded_at_run_time_changes_the_logprobs(
    backend: OpenAIBackend, reference: dict[str, Any]
) -> None:
    base_scores = backend.score_yes_no(QUESTIONS)
    (base,) = backend.generate(FIBONACCI, max_tokens=8, temperature=0.0)

    backend.load_adapter("random", str(reference["adapter_dir"]))
    assert backend.adapters() == ["random"]
    backend.use_adapter("random")
    try:
        scores = backend.score_yes_no(QUESTIONS)
        (adapted,) = backend.generate(FIBONACCI, max_tokens=8, temperature=0.0)
    finally:
        backend.use_adapter(None)
    assert scores == pytest.approx(reference["adapter"], abs=2e-2)
    assert max(abs(a - b) for a, b in zip(scores, base_scores, strict=True)) > 0.1
    assert adapted.token_ids != base.token_ids or adapted.logprobs != pytest.approx(
        base.logprobs, abs=1e-3
    )
    # Back on the base model, the base numbers again.
    assert backend.score_yes_no(QUESTIONS) == pytest.approx(base_scores, abs=1e-3)


def test_the_in_process_vllm_backend_finds_the_same_leading_tokens(
    gemma_dir: Path, tiny_model_dir: Path
) -> None:
    """VLLMBackend (checked end to end on the tiny model in test_vllm_backend.py) puts
    Gemma's <bos> before its prompts, and nothing before the tiny Qwen's."""
    from transformers import AutoTokenizer

    from agents.backends.vllm_backend import _leading_special_ids

    gemma = AutoTokenizer.from_pretrained(gemma_dir)
    assert _leading_special_ids(gemma) == [gemma.bos_token_id]
    assert _leading_special_ids(AutoTokenizer.from_pretrained(tiny_model_dir)) == []
