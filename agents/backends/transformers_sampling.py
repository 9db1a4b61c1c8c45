"""How the transformers backend samples and scores: the decoding loop (one prefill, the
rows decoding together, a row leaving the batch as it ends), the token draw, each row's
incremental text and stop strings, grammar-constrained decoding with xgrammar, and the
next-token logits `score_yes_no` reads. `TransformersBackend` takes these methods from
`_SamplingMixin`; see `transformers_backend` for the conventions they keep.

torch, transformers and xgrammar are imported only inside the functions that use them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.backends.base import BackendError, Candidate, one_line

#: Compiled grammars kept per backend (each is small; the runtime uses a handful).
_GRAMMAR_CACHE_SIZE = 64

#: Prompts to score that share at least this many first tokens encode them once.
SHARED_PREFIX_TOKENS = 32


@dataclass
class _PromptCache:
    """The last generation prompt's encoding: its tokens, the key/value cache of them
    (batch of one) and the next-token logits after them, with the model and adapter that
    computed them. A later prompt that starts with these tokens (the evaluator's questions
    about the block, the next block's prompt) encodes only what follows them."""

    ids: list[int]
    cache: Any
    logits: Any
    model: int  # id() of the model object
    adapter: str | None


def _shared_prefix(encoded: list[list[int]]) -> int:
    """How many first tokens every prompt shares, leaving each at least one of its own."""
    shortest = min(len(ids) for ids in encoded)
    first = encoded[0]
    shared = 0
    while shared < shortest - 1 and all(ids[shared] == first[shared] for ids in encoded):
        shared += 1
    return shared


def _draw(torch: Any, probs: Any, uniforms: Any, width: int = 1024) -> Any:
    """One token per row of `probs` (rows x vocabulary, each row summing to ~1), by
    inverting its cumulative distribution at `uniforms` (one number in [0, 1) per row).

    What `torch.multinomial` does, in two levels: the block of `width` tokens first (from
    float64 block sums), then the token inside it. multinomial took ~6 ms a row over a
    262k vocabulary on a CPU (48 ms for 8 rows, a third of a bfloat16 decoding step of
    Gemma 3 270M); this takes ~1 ms for all 8. A token of probability 0 (masked by a
    grammar) is never drawn: rounding can only push past a block's last positive token,
    and the draw is clamped to it."""
    rows, vocabulary = probs.shape
    blocks_n = -(-vocabulary // width)
    pad = blocks_n * width - vocabulary
    padded = probs if pad == 0 else torch.nn.functional.pad(probs, (0, pad))
    blocks = padded.view(rows, blocks_n, width)
    sums = blocks.sum(dim=-1, dtype=torch.float64)
    cdf = sums.cumsum(dim=-1)
    target = (uniforms * cdf[:, -1])[:, None]
    block = torch.searchsorted(cdf, target, right=True).clamp_(max=blocks_n - 1)
    target = target - (cdf.gather(-1, block) - sums.gather(-1, block))
    inner = blocks[torch.arange(rows, device=probs.device), block[:, 0]].double().cumsum(dim=-1)
    last_positive = (inner < inner[:, -1:]).sum(dim=-1, keepdim=True)
    offset = torch.minimum(torch.searchsorted(inner, target, right=True), last_positive)
    return (block * width + offset)[:, 0]


class _RowText:
    """The text of one candidate as its tokens arrive. Each step decodes only the newest
    few tokens (incremental detokenization, as TGI and vLLM do it), searches only the new
    text for stop strings, and says which new text is safe to stream: settled (no
    character half-way through its bytes) and not possibly the start of a stop string,
    which must never reach the screen."""

    #: A character has at most 4 UTF-8 bytes: past this many undecodable tokens the text
    #: is invalid UTF-8 the model wrote, not a character still arriving.
    MAX_PENDING = 4

    def __init__(self, decode: Callable[[Sequence[int]], str], stops: Sequence[str]) -> None:
        self._decode = decode
        self._stops = stops
        self._longest = max((len(s) for s in stops), default=0)
        self._prefix = 0  # tokens decoded again each step, for context ...
        self._read = 0  # ... up to here; the tokens after it are new
        self._prefix_text = ""  # decode(tokens[_prefix:_read])
        self.text = ""  # settled text: only ever grows
        self.streamed = 0  # characters of `text` already handed out

    def add(self, tokens: list[int]) -> bool:
        """Take the row's tokens (one more than last time); True once a stop string has
        appeared in their text."""
        settled = len(self.text)
        pending = self._decode(tokens[self._prefix :])[len(self._prefix_text) :]
        if pending and (
            not pending.endswith("\ufffd") or len(tokens) - self._read >= self.MAX_PENDING
        ):
            self.text += pending
            self._prefix, self._read = self._read, len(tokens)
            self._prefix_text = self._decode(tokens[self._prefix : self._read])
            pending = ""
        if not self._stops:
            return False
        view = self.text + pending
        start = max(0, settled - self._longest + 1)
        return any(view.find(stop, start) >= 0 for stop in self._stops)

    def streamable(self) -> str:
        """The settled text not yet handed out, less any tail that could still grow into
        a stop string."""
        end = len(self.text)
        for stop in self._stops:
            for k in range(min(len(stop) - 1, end), 0, -1):
                if self.text.endswith(stop[:k]):
                    end = min(end, len(self.text) - k)
                    break
        if end <= self.streamed:
            return ""
        piece, self.streamed = self.text[self.streamed : end], end
        return piece

    def rest(self, final: str) -> str:
        """What is left to hand out once the candidate's final text is known, so that the
        pieces add up to exactly that text."""
        if not final.startswith(self.text[: self.streamed]):
            return ""  # cannot happen with a sane tokenizer; never stream a correction
        piece, self.streamed = final[self.streamed :], len(final)
        return piece


@dataclass
class _Row:
    """One candidate being sampled."""

    text: _RowText
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    #: why it ended: "eos", "stop" (a stop string), "grammar" (nothing but the end of
    #: sequence may follow) or "length"; None while it runs
    end: str | None = None
    matcher: Any = None  # its xgrammar GrammarMatcher, with a grammar


class _SamplingMixin:
    """The sampling and scoring half of `TransformersBackend`, which sets these."""

    _device: str
    _vocab_size: int
    _eos_ids: list[int]
    _tokenizer: Any
    _tokenizer_lock: threading.Lock
    _grammars: dict[str, Any]
    _grammar_compiler: Any
    _other_than_stop: Any
    _grammar_scratch: Any
    _active: str | None
    _prompt_cache: _PromptCache | None
    keep_prompt: bool

    def _decode(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def _sample(
        self,
        model: Any,
        ids: list[int],
        *,
        rows: int,
        max_tokens: int,
        temperature: float,
        stops: list[str],
        seed: int | None,
        compiled: Any,
        emit: Callable[[int, str], None],
        no_repeat: int = 0,
        greedy_first: bool = False,
    ) -> list[Candidate]:
        """The decoding loop: one prefill, the cache repeated for the rows, then one
        forward per step over the rows still running; a row that ends leaves the batch and
        the cache at once. With `greedy_first`, row 0 takes the most likely token of the
        distribution the other rows draw from. Every forward computes the vocabulary head for the last
        position only (it dominates a step of a small model with a big vocabulary)."""
        import torch

        scale = temperature if temperature > 0 else 1.0
        generators = self._row_generators(torch, rows, seed)
        state = [_Row(text=_RowText(self._decode, stops)) for _ in range(rows)]
        bitmask = None
        if compiled is not None:
            import xgrammar as xgr

            bitmask = xgr.allocate_token_bitmask(rows, self._vocab_size)
            for row in state:
                row.matcher = xgr.GrammarMatcher(compiled)
        finished: list[Candidate | None] = [None] * rows
        ban = None
        if no_repeat:
            from transformers.generation.logits_process import NoRepeatNGramLogitsProcessor

            ban = NoRepeatNGramLogitsProcessor(no_repeat)

        cache, logits = self._prefill(model, ids, keep=True)
        logits = logits.float()
        if rows > 1:
            cache.batch_repeat_interleave(rows)
            logits = logits.expand(rows, -1)
        live = list(range(rows))  # the original row of each batch position
        while True:
            scaled = logits / scale  # a fresh tensor: the mask below writes into it
            if bitmask is not None:
                for position, r in enumerate(live):
                    state[r].matcher.fill_next_token_bitmask(bitmask, position)
                # xgrammar masks on a CPU or a CUDA device; elsewhere (MPS), on the CPU.
                masked = scaled if scaled.device.type in ("cpu", "cuda") else scaled.cpu()
                xgr.apply_token_bitmask_inplace(
                    masked, bitmask[: len(live)].to(masked.device), vocab_size=self._vocab_size
                )
                scaled = masked.to(scaled.device)
            if ban is not None:
                seen = torch.tensor(
                    [ids + state[r].tokens for r in live], dtype=torch.long, device=self._device
                )
                banned = ban(seen, scaled)
                # where the ban leaves nothing (the grammar allows only a repeat), no ban
                open_rows = torch.isfinite(banned).any(dim=-1, keepdim=True)
                scaled = torch.where(open_rows, banned, scaled)
            logprobs = scaled.log_softmax(dim=-1)
            if temperature > 0:
                # Each row draws from its own generator, so a row's sample never depends
                # on which other rows are still running.
                uniforms = torch.cat(
                    [torch.rand(1, dtype=torch.float64, generator=generators[r]) for r in live]
                )
                probs = logprobs.exp()
                if probs.device.type == "mps":  # no float64 there
                    probs = probs.cpu()
                picked = _draw(torch, probs, uniforms.to(probs.device)).to(logprobs.device)
                if greedy_first and live[0] == 0:
                    picked[0] = logprobs[0].argmax()
            else:
                picked = logprobs.argmax(dim=-1)
            picked_logprobs = logprobs.gather(-1, picked[:, None]).squeeze(-1).tolist()

            keep: list[int] = []
            for position, (r, token) in enumerate(zip(live, picked.tolist(), strict=True)):
                row = state[r]
                row.tokens.append(token)
                row.logprobs.append(picked_logprobs[position])
                self._advance(row, token, max_tokens)
                if row.end is None:
                    emit(r, row.text.streamable())
                    keep.append(position)
                else:
                    done = finished[r] = self._candidate(row, stops)
                    emit(r, row.text.rest(done.text))
            if not keep:
                break
            if len(keep) < len(live):
                index = torch.tensor(keep, dtype=torch.long, device=self._device)
                cache.batch_select_indices(index)
                picked = picked[index]
                live = [live[position] for position in keep]
            out = model(
                input_ids=picked[:, None],
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            logits = out.logits[:, -1, :].float()
        return [c for c in finished if c is not None]

    def _advance(self, row: _Row, token: int, max_tokens: int) -> None:
        """Take `token` into the row: feed its grammar and its text, and see whether the
        row has ended (the first reason wins: end of sequence, stop string, grammar done,
        length)."""
        if row.matcher is not None and not row.matcher.accept_token(token):
            raise BackendError(f"the grammar matcher refused token {token} it allowed")
        if token in self._eos_ids:
            row.end = "eos"
        elif row.text.add(row.tokens):
            row.end = "stop"
        elif row.matcher is not None and self._grammar_done(row.matcher):
            row.end = "grammar"
        elif len(row.tokens) >= max_tokens:
            row.end = "length"

    def _row_generators(self, torch: Any, rows: int, seed: int | None) -> list[Any]:
        """One random generator per row, all drawn from `seed` (or from the OS)."""
        if seed is None:
            seed = int.from_bytes(os.urandom(8), "little") >> 1
        master = torch.Generator().manual_seed(seed)
        seeds = torch.randint(0, 2**62, (rows,), generator=master).tolist()
        return [torch.Generator().manual_seed(s) for s in seeds]

    def _candidate(self, row: _Row, stops: Sequence[str]) -> Candidate:
        """A finished row as a Candidate: the text leaves out the end-of-sequence token
        and the stop string, the ids keep them."""
        text = self._decode(row.tokens[:-1] if row.end == "eos" else row.tokens)
        if row.end == "stop":
            found = [i for i in (text.find(s) for s in stops) if i >= 0]
            text = text[: min(found)] if found else text
        return Candidate(
            text=text,
            token_ids=list(row.tokens),
            logprobs=list(row.logprobs),
            finish_reason="length" if row.end == "length" else "stop",
        )

    # ---- structured decoding ---------------------------------------------------------

    def _compiled_grammar(self, grammar: str) -> Any:
        """`grammar` compiled for this tokenizer, from a cache keyed by its text (the
        runtime asks for the same few grammars over and over)."""
        cached = self._grammars.get(grammar)
        if cached is not None:
            return cached
        try:
            import xgrammar as xgr
        except ImportError as exc:
            raise BackendError(
                f"structured decoding needs the xgrammar package ({one_line(exc)})"
            ) from exc
        if self._grammar_compiler is None:
            import torch

            with self._tokenizer_lock:
                info = xgr.TokenizerInfo.from_huggingface(
                    self._tokenizer, vocab_size=self._vocab_size, stop_token_ids=self._eos_ids
                )
            self._grammar_compiler = xgr.GrammarCompiler(info)
            stop_bits = xgr.allocate_token_bitmask(1, self._vocab_size).zero_()
            for token in self._eos_ids:
                word, bit = divmod(token, 32)
                value = int(stop_bits[0, word]) | (1 << bit)
                stop_bits[0, word] = value - (1 << 32) if value >= 1 << 31 else value
            self._other_than_stop = torch.bitwise_not(stop_bits)
            self._grammar_scratch = xgr.allocate_token_bitmask(1, self._vocab_size)
        try:
            compiled = self._grammar_compiler.compile_grammar(grammar)
        except (RuntimeError, ValueError) as exc:
            raise BackendError(f"the grammar does not compile: {one_line(exc)}") from exc
        if len(self._grammars) >= _GRAMMAR_CACHE_SIZE:
            self._grammars.pop(next(iter(self._grammars)))
        self._grammars[grammar] = compiled
        return compiled

    def _grammar_done(self, matcher: Any) -> bool:
        """True once the grammar is matched and only an end-of-sequence token may follow:
        the row ends there, a forward pass sooner than sampling that token would."""
        if matcher.is_terminated():
            return True
        if not matcher.is_completed():
            return False
        matcher.fill_next_token_bitmask(self._grammar_scratch, 0)
        return not bool((self._grammar_scratch & self._other_than_stop).any())

    def _prefill(self, model: Any, ids: list[int], *, keep: bool) -> tuple[Any, Any]:
        """The key/value cache of `ids` (batch of one, the caller's to extend) and the
        next-token logits after them (1 x vocabulary). What the last kept prompt shares
        with `ids` is copied from its cache, and only the rest is encoded: a block's
        questions are its prompt plus the block, and the next block's prompt mostly the
        last one's plus what happened since. With `keep`, these `ids` become the kept
        prompt."""
        import copy

        import torch

        kept = self._prompt_cache
        reuse = self._reusable(model, ids)
        cache, logits = None, None
        if kept is not None and reuse:
            cache = copy.deepcopy(kept.cache)
            if reuse < len(kept.ids):
                for layer in cache.layers:
                    layer.crop(reuse - len(kept.ids))
            if reuse == len(ids):
                logits = kept.logits
        if reuse < len(ids):
            out = model(
                input_ids=torch.tensor([ids[reuse:]], dtype=torch.long, device=self._device),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]
        if keep and self.keep_prompt:
            self._prompt_cache = _PromptCache(
                list(ids), copy.deepcopy(cache), logits, id(model), self._active
            )
        return cache, logits

    def _reusable(self, model: Any, ids: list[int]) -> int:
        """How many first tokens of `ids` the kept prompt's cache can stand for: all it
        holds where it is the start of `ids`; else what they share, where that is worth it
        and every layer of the cache can be cut back (not a sliding window's), leaving
        at least one token to encode; else none."""
        kept = self._prompt_cache
        if (
            not self.keep_prompt
            or kept is None
            or kept.model != id(model)
            or kept.adapter != self._active
        ):
            return 0
        common = 0
        for a, b in zip(kept.ids, ids, strict=False):
            if a != b:
                break
            common += 1
        if common == len(kept.ids):
            return common
        from transformers.cache_utils import DynamicLayer

        if common < SHARED_PREFIX_TOKENS or any(
            type(layer) is not DynamicLayer for layer in kept.cache.layers
        ):
            return 0
        return min(common, len(ids) - 1)

    def _last_logits(self, model: Any, encoded: list[list[int]]) -> Any:
        """The next-token logits after each prompt, in one padded batch."""
        import torch

        # Left padding puts every prompt's last token in the last column; positions count
        # from each prompt's first real token, so a padded row computes what it would alone.
        width = max(len(ids) for ids in encoded)
        pad = int(self._tokenizer.pad_token_id)
        input_ids = torch.tensor(
            [[pad] * (width - len(ids)) + ids for ids in encoded], dtype=torch.long
        )
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(
            input_ids=input_ids.to(self._device),
            attention_mask=mask.to(self._device),
            position_ids=positions.to(self._device),
            logits_to_keep=1,
            use_cache=False,
        )
        return out.logits[:, -1, :]

    def _last_logits_after_prefix(self, model: Any, encoded: list[list[int]], shared: int) -> Any:
        """The same logits when the prompts share their first `shared` tokens (the
        evaluator's questions about the candidates of one block): the prefix is encoded
        once and its cache repeated; the rest of each prompt follows, right-padded (a
        causal model's real tokens never see the padding after them)."""
        import torch

        cache, _ = self._prefill(model, encoded[0][:shared], keep=False)
        cache.batch_repeat_interleave(len(encoded))
        rests = [ids[shared:] for ids in encoded]
        width = max(len(rest) for rest in rests)
        pad = int(self._tokenizer.pad_token_id)
        input_ids = torch.tensor(
            [rest + [pad] * (width - len(rest)) for rest in rests], dtype=torch.long
        )
        ends = sorted({len(rest) - 1 for rest in rests})
        out = model(
            input_ids=input_ids.to(self._device),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=torch.tensor(ends, device=self._device),
        )
        column = {end: i for i, end in enumerate(ends)}
        rows = torch.arange(len(rests), device=self._device)
        picks = torch.tensor([column[len(rest) - 1] for rest in rests], device=self._device)
        return out.logits[rows, picks, :]
