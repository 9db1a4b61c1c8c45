"""TransformersBackend's own decoding loop: one prefill for all candidates, rows that
leave the batch (and the KV cache) when they end, streaming, grammar-constrained decoding.

Checked against the tests' tiny random Qwen2 model, and (marked slow) against Gemma 3
270M when its converted folder is on disk. The strongest check is the logprobs: every one
must equal the log-softmax of temperature-scaled logits from one full forward pass over
prompt + completion, which only holds if the repeated cache and the rows dropped from it
still line up with the right sequences."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agents.backends.base import BackendError, Candidate
from agents.backends.transformers_backend import TransformersBackend

PROMPT = "#startblock type: action\n#index 3\n\ndef action_check(subagent):\n"
GRAMMAR = 'root ::= "def f(x):\\n    return " [0-9]+ "\\n#endblock"'
GRAMMAR_DONE = re.compile(r"def f\(x\):\n    return [0-9]+\n#endblock")
GRAMMAR_SO_FAR = re.compile(r"def f\(x\):\n    return [0-9]+")


@pytest.fixture(scope="module")
def backend(tiny_model_dir: Path) -> Iterator[TransformersBackend]:
    opened = TransformersBackend(str(tiny_model_dir))
    yield opened
    opened.close()


def full_forward_logprobs(
    backend: TransformersBackend,
    prompt: list[int],
    cand: Candidate,
    temperature: float,
    grammar: str | None = None,
) -> list[float]:
    """Independently of the backend's loop: one forward pass over prompt + completion, no
    cache; the log-softmax of each completion position's temperature-scaled logits (masked
    by a fresh grammar matcher fed the tokens so far, with a grammar), at the token taken."""
    import torch

    with torch.inference_mode():
        logits = backend._base(input_ids=torch.tensor([prompt + cand.token_ids])).logits[0]
    steps = logits[len(prompt) - 1 : -1].float() / (temperature if temperature > 0 else 1.0)
    if grammar is not None:
        import xgrammar as xgr

        matcher = xgr.GrammarMatcher(backend._compiled_grammar(grammar))
        mask = xgr.allocate_token_bitmask(1, backend._vocab_size)
        for i, token in enumerate(cand.token_ids):
            matcher.fill_next_token_bitmask(mask, 0)
            xgr.apply_token_bitmask_inplace(steps[i : i + 1], mask)
            assert matcher.accept_token(token)
    chosen = torch.tensor(cand.token_ids)[:, None]
    return steps.log_softmax(-1).gather(-1, chosen).squeeze(-1).tolist()


def two_token_stop(backend: TransformersBackend, tokens: Sequence[int], start: int) -> str:
    """A stop string made of two tokens of a completion, clean text, first found there."""
    full = backend._decode(tokens)
    for k in range(start, len(tokens) - 2):
        stop = backend._decode(tokens[k : k + 2])
        where = len(backend._decode(tokens[:k]))
        if len(stop.strip()) >= 2 and "\ufffd" not in stop and full.find(stop) == where:
            return stop
    raise AssertionError(f"no usable stop string in {full!r}")


# ---- rows end on their own -----------------------------------------------------------


def test_a_row_that_stops_early_leaves_the_others_whole(backend: TransformersBackend) -> None:
    free = backend.generate(PROMPT, n=6, max_tokens=24, seed=8)
    stop = two_token_stop(backend, free[2].token_ids, 3)
    cut = backend.generate(PROMPT, n=6, max_tokens=24, seed=8, stop=[stop])

    assert cut[2].finish_reason == "stop" and len(cut[2].token_ids) < 24
    for whole, part in zip(free, cut, strict=True):
        # Each row draws from its own generator: the tokens never depend on which other
        # rows are still in the batch. The logprobs agree to float32 rounding (a smaller
        # batch may take another matmul kernel).
        assert part.token_ids == whole.token_ids[: len(part.token_ids)]
        assert part.logprobs == pytest.approx(whole.logprobs[: len(part.logprobs)], abs=1e-5)
        if stop in whole.text:
            assert part.finish_reason == "stop"
            assert part.text == whole.text[: whole.text.find(stop)]  # text stops before it
            assert stop in backend._decode(part.token_ids)  # ids include its tokens
            assert stop not in backend._decode(part.token_ids[:-1])  # the last one ended it
        else:
            assert (part.text, part.finish_reason) == (whole.text, whole.finish_reason)
            assert len(part.token_ids) == len(whole.token_ids)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_logprobs_equal_a_full_forward_pass_also_after_rows_left(
    backend: TransformersBackend, temperature: float
) -> None:
    """Rows 1 and 3 end early, so the others run on in a smaller batch with a cache that
    lost rows; every row's logprobs must still match an uncached forward pass."""
    prompt = backend.tokenize(PROMPT)
    free = backend.generate(prompt, n=5, max_tokens=20, temperature=temperature, seed=21)
    stops = [two_token_stop(backend, free[1].token_ids, 2)]
    stops.append(two_token_stop(backend, free[3].token_ids, 8))
    cut = backend.generate(prompt, n=5, max_tokens=20, temperature=temperature, seed=21, stop=stops)
    lengths = [len(c.token_ids) for c in cut]
    assert lengths[1] < 20 and lengths[3] < 20 and max(lengths) == 20
    for cand in cut:
        assert len(cand.logprobs) == len(cand.token_ids)
        expected = full_forward_logprobs(backend, prompt, cand, temperature)
        assert cand.logprobs == pytest.approx(expected, abs=1e-4)


def test_greedy_is_the_argmax_of_a_full_forward_pass(backend: TransformersBackend) -> None:
    import torch

    prompt = backend.tokenize(PROMPT)
    cand = backend.generate(prompt, n=2, max_tokens=16, temperature=0)[0]
    with torch.inference_mode():
        logits = backend._base(input_ids=torch.tensor([prompt + cand.token_ids])).logits[0]
    assert logits[len(prompt) - 1 : -1].argmax(-1).tolist() == cand.token_ids
    assert cand.logprobs == pytest.approx(full_forward_logprobs(backend, prompt, cand, 0))


@pytest.mark.parametrize("batched", [True, False])
def test_greedy_first_is_the_greedy_answer_among_samples(
    backend: TransformersBackend, batched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Row 0 is the greedy sequence, in the same batch as the samples (its logprobs under
    their temperature) or, where a backend cannot batch it, from a greedy request first;
    either way every row streams under its own index."""
    monkeypatch.setattr(backend, "batches_greedy", batched)
    prompt = backend.tokenize(PROMPT)
    greedy = backend.generate(prompt, n=1, max_tokens=16, temperature=0)[0]
    pieces: dict[int, list[str]] = {}
    cands = backend.generate(
        prompt,
        n=4,
        max_tokens=16,
        temperature=1.5,
        seed=3,
        greedy_first=True,
        on_token=lambda row, piece: pieces.setdefault(row, []).append(piece),
    )
    assert len(cands) == 4
    assert cands[0].token_ids == greedy.token_ids
    assert any(c.token_ids != greedy.token_ids for c in cands[1:])  # hot samples differ
    for row, cand in enumerate(cands):
        assert "".join(pieces.get(row, [])) == cand.text
    if batched:
        expected = full_forward_logprobs(backend, prompt, cands[0], 1.5)
        assert cands[0].logprobs == pytest.approx(expected, abs=1e-4)
    # one candidate asked for with greedy_first is the greedy one
    alone = backend.generate(prompt, n=1, max_tokens=16, temperature=1.5, greedy_first=True)
    assert alone[0].token_ids == greedy.token_ids


def test_a_seed_repeats_the_sample(backend: TransformersBackend) -> None:
    first = backend.generate(PROMPT, n=4, max_tokens=12, seed=5, stop=["e"])
    assert backend.generate(PROMPT, n=4, max_tokens=12, seed=5, stop=["e"]) == first
    assert backend.generate(PROMPT, n=4, max_tokens=12, seed=6, stop=["e"]) != first
    unseeded = [backend.generate(PROMPT, n=2, max_tokens=12) for _ in range(2)]
    assert unseeded[0] != unseeded[1]


# ---- streaming -------------------------------------------------------------------------


def collect(backend: TransformersBackend, **kwargs: Any) -> tuple[list[Candidate], dict]:
    pieces: dict[int, list[str]] = {}
    cands = backend.generate(
        PROMPT, on_token=lambda row, piece: pieces.setdefault(row, []).append(piece), **kwargs
    )
    return cands, pieces


@pytest.mark.parametrize("seed", range(6))
def test_streamed_pieces_add_up_to_each_candidates_text(
    backend: TransformersBackend, seed: int
) -> None:
    """The contract: a row's pieces, joined, are exactly its Candidate.text. So the stop
    string is never streamed, even in part (text that could still become one is held back
    until it can't), and neither is the end-of-sequence token."""
    free = backend.generate(PROMPT, n=4, max_tokens=24, seed=seed)
    stops = [two_token_stop(backend, free[seed % 4].token_ids, 4), "e", "\n#"]
    cands, pieces = collect(backend, n=4, max_tokens=24, seed=seed, stop=stops)
    assert any(c.finish_reason == "stop" for c in cands)
    for row, cand in enumerate(cands):
        assert "".join(pieces.get(row, [])) == cand.text
        assert all(pieces.get(row, []))  # no empty pieces
    assert set(pieces) <= set(range(4))


def test_greedy_streams_to_every_candidate_index(backend: TransformersBackend) -> None:
    cands, pieces = collect(backend, n=3, max_tokens=10, temperature=0)
    assert sorted(pieces) == [0, 1, 2]
    assert ["".join(pieces[row]) for row in range(3)] == [c.text for c in cands]


def test_the_callback_may_tokenize_while_generate_runs(backend: TransformersBackend) -> None:
    """The callback runs on the generating thread; a UI callback that tokenizes (to count
    tokens, say) must not deadlock on the tokenizer's lock."""
    counted: list[int] = []
    done: list[list[Candidate]] = []

    def run() -> None:
        done.append(
            backend.generate(
                PROMPT,
                n=2,
                max_tokens=12,
                seed=1,
                on_token=lambda row, piece: counted.append(len(backend.tokenize(piece))),
            )
        )

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive(), "generate deadlocked with a tokenizing callback"
    assert done and counted


# ---- structured decoding ---------------------------------------------------------------


def test_every_candidate_follows_the_grammar(backend: TransformersBackend) -> None:
    cands = backend.generate(PROMPT, n=6, max_tokens=60, temperature=1.0, seed=0, grammar=GRAMMAR)
    assert any(c.finish_reason == "stop" for c in cands)
    for cand in cands:
        if cand.finish_reason == "stop":
            assert GRAMMAR_DONE.fullmatch(cand.text), cand.text
            # It ends where the grammar does: no end-of-sequence token sampled after it.
            assert cand.token_ids[-1] not in backend._eos_ids
        else:
            assert len(cand.token_ids) == 60 and GRAMMAR_SO_FAR.fullmatch(cand.text)
    unconstrained = backend.generate(PROMPT, n=6, max_tokens=60, seed=0)
    assert not any(c.text.startswith("def f(x):") for c in unconstrained)


def test_grammar_logprobs_are_under_the_masked_distribution(
    backend: TransformersBackend,
) -> None:
    prompt = backend.tokenize(PROMPT)
    cands = backend.generate(prompt, n=3, max_tokens=40, temperature=0.8, seed=3, grammar=GRAMMAR)
    for cand in cands:
        expected = full_forward_logprobs(backend, prompt, cand, 0.8, grammar=GRAMMAR)
        assert cand.logprobs == pytest.approx(expected, abs=1e-4)
    # The forced literal's tokens have probability 1 once masked.
    assert max(cands[0].logprobs[:3]) == pytest.approx(0.0, abs=1e-6)


def test_stop_strings_still_apply_with_a_grammar(backend: TransformersBackend) -> None:
    plain = backend.generate(PROMPT, n=4, max_tokens=60, seed=0, grammar=GRAMMAR)
    cut = backend.generate(PROMPT, n=4, max_tokens=60, seed=0, grammar=GRAMMAR, stop=["#end"])
    for whole, part in zip(plain, cut, strict=True):
        if whole.finish_reason == "stop":
            assert part.finish_reason == "stop" and part.text == whole.text[: -len("#endblock")]
            assert "#end" in backend._decode(part.token_ids)
            assert "#end" not in backend._decode(part.token_ids[:-1])
        else:
            assert part == whole


def test_greedy_follows_the_grammar_too(backend: TransformersBackend) -> None:
    cands, pieces = collect(backend, n=2, max_tokens=60, temperature=0, grammar=GRAMMAR)
    assert cands[0] == cands[1]
    assert GRAMMAR_DONE.fullmatch(cands[0].text) or GRAMMAR_SO_FAR.fullmatch(cands[0].text)
    assert "".join(pieces[1]) == cands[1].text


def _repeats(tokens: Sequence[int], k: int, start: int) -> list[int]:
    """Positions from `start` on where a run of k tokens ends that occurred before."""
    runs = {tuple(tokens[i : i + k]) for i in range(start - k + 1)}
    found = []
    for end in range(start, len(tokens)):
        run = tuple(tokens[end - k + 1 : end + 1])
        if run in runs:
            found.append(end)
        runs.add(run)
    return found


def _banned_logprobs(
    backend: TransformersBackend, prompt: list[int], cand: Candidate, temperature: float, k: int
) -> list[float]:
    """Independently of the backend: each step's temperature-scaled logits with every
    token that would complete an earlier run of k tokens set to -inf, log-softmaxed."""
    import torch

    with torch.inference_mode():
        logits = backend._base(input_ids=torch.tensor([prompt + cand.token_ids])).logits[0]
    steps = logits[len(prompt) - 1 : -1].float() / (temperature if temperature > 0 else 1.0)
    seen = prompt + cand.token_ids
    for i in range(len(cand.token_ids)):
        before = seen[: len(prompt) + i]
        tail = tuple(before[len(before) - k + 1 :]) if k > 1 else ()
        for j in range(len(before) - k + 1):
            if tuple(before[j : j + k - 1]) == tail:
                steps[i, before[j + k - 1]] = float("-inf")
    chosen = torch.tensor(cand.token_ids)[:, None]
    return steps.log_softmax(-1).gather(-1, chosen).squeeze(-1).tolist()


def test_no_repeat_bans_runs_of_the_prompt_and_the_completion(
    backend: TransformersBackend,
) -> None:
    prompt = backend.tokenize(PROMPT)
    # the tiny model, greedy, loops on a token of the prompt
    loop = backend.generate(prompt, max_tokens=24, temperature=0)[0]
    assert _repeats(prompt + loop.token_ids, 2, len(prompt))
    for k, temperature in ((2, 0.0), (1, 1.0), (3, 0.7)):
        cands = backend.generate(
            prompt, n=3, max_tokens=24, temperature=temperature, seed=5, no_repeat=k
        )
        for cand in cands:
            assert len(cand.token_ids) == 24
            assert _repeats(prompt + cand.token_ids, k, len(prompt)) == []
            expected = _banned_logprobs(backend, prompt, cand, temperature, k)
            assert cand.logprobs == pytest.approx(expected, abs=1e-4)
    with pytest.raises(BackendError, match="no_repeat"):
        backend.generate(prompt, max_tokens=4, no_repeat=-1)


def test_a_bad_grammar_is_one_line(backend: TransformersBackend) -> None:
    with pytest.raises(BackendError, match="grammar") as caught:
        backend.generate(PROMPT, max_tokens=4, grammar="root ::= ")
    assert "\n" not in str(caught.value)


# ---- scoring ------------------------------------------------------------------------------


def _questions(context: str) -> list[str]:
    """The evaluator's prompts for four candidates of one block: a long shared context,
    then each candidate (of different lengths) and the question."""
    bodies = ["x = 1", "def f(subagent):\n    return subagent.read_file('a.txt')", "", "y"]
    return [f"{context}{body}\n#q: Is this block right? (yes or no)\n" for body in bodies]


def test_scores_after_a_shared_prefix_equal_each_prompt_alone(
    backend: TransformersBackend,
) -> None:
    from agents.backends import transformers_backend as tb

    prompts = _questions(PROMPT * 8)
    encoded = [backend._prompt_ids(p) for p in prompts]
    assert tb._shared_prefix(encoded) >= tb.SHARED_PREFIX_TOKENS  # the shared path runs
    together = backend.score_yes_no(prompts)
    alone = [backend.score_yes_no([p])[0] for p in prompts]
    assert together == pytest.approx(alone, abs=1e-4)
    assert len(set(together)) == len(prompts)
    # a prompt that is all prefix still has a token of its own to read the answer after
    assert tb._shared_prefix([[1, 2, 3], [1, 2, 3, 4]]) == 2


# ---- dtype --------------------------------------------------------------------------------


def test_small_models_stay_float32_on_a_cpu(backend: TransformersBackend) -> None:
    import torch

    assert backend._device == "cpu" and backend._dtype == torch.float32
    assert backend._base.dtype == torch.float32


def test_big_models_take_bf16_only_where_the_cpu_has_it(
    backend: TransformersBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule, on the tiny model's config scaled up past 100M parameters (a 262k
    vocabulary x 512 wide embedding alone is 134M)."""
    import torch

    from agents.backends import transformers_backend as module

    big = backend._base.config.__class__.from_dict(
        {**backend._base.config.to_dict(), "vocab_size": 262144, "hidden_size": 512}
    )
    pick = TransformersBackend._pick_dtype
    monkeypatch.setattr(module, "cpu_has_bf16", lambda torch: True)
    assert pick(torch, "cpu", big) == torch.bfloat16
    assert pick(torch, "cpu", backend._base.config) == torch.float32
    big.dtype = torch.float16  # bf16 would drop 3 of its weights' 10 mantissa bits
    assert pick(torch, "cpu", big) == torch.float32
    big.dtype = torch.bfloat16
    assert pick(torch, "mps", big) == torch.float32
    monkeypatch.setattr(module, "cpu_has_bf16", lambda torch: False)
    assert pick(torch, "cpu", big) == torch.float32


# ---- the real model (Gemma 3 270M, sliding-window layers) ------------------------------


@pytest.fixture(scope="module")
def gemma(gemma_dir: Path) -> Iterator[TransformersBackend]:
    opened = TransformersBackend(str(gemma_dir), dtype="float32")
    yield opened
    opened.close()


@pytest.mark.slow
def test_gemma_one_prefill_logprobs_match_a_full_forward(gemma: TransformersBackend) -> None:
    """A prompt past Gemma 3's 512-token sliding window, so the repeated cache's sliding
    layers have already dropped their oldest entries when decoding starts."""
    context = "".join(
        f"#startblock type: observation\n#index {i}\n\n# x_{i} = {i * i}\n#endblock\n"
        for i in range(40)
    )
    prompt = gemma._prompt_ids(context + "#startblock type: action\n#index 40\n\n")
    assert len(prompt) > 600
    cands = gemma.generate(prompt, n=2, max_tokens=20, temperature=0.8, seed=0)
    assert cands[0].token_ids != cands[1].token_ids
    for cand in cands:
        expected = full_forward_logprobs(gemma, prompt, cand, 0.8)
        assert cand.logprobs == pytest.approx(expected, abs=2e-3)


@pytest.mark.slow
def test_gemma_scores_after_a_shared_prefix_equal_each_prompt_alone(
    gemma: TransformersBackend,
) -> None:
    """Past the sliding window too: the shared cache, repeated, then right-padded rests."""
    context = "".join(
        f"#startblock type: observation\n# x_{i} = {i * i}\n#endblock\n" for i in range(40)
    )
    prompts = _questions(context)
    assert len(gemma._prompt_ids(prompts[0])) > 600
    together = gemma.score_yes_no(prompts)
    alone = [gemma.score_yes_no([p])[0] for p in prompts]
    assert together == pytest.approx(alone, abs=2e-3)
