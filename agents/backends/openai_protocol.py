"""The completions and chat requests of the openai backend, and how their replies are
read: sampling options (vLLM's extras, structured outputs), the unstreamed and streamed
completions, chat completions, yes/no scoring by completions or by chat, and the logprob
keys (`token_id:N` or token text). `OpenAIBackend` takes these methods from
`_OpenAIProtocol`; the module docstring of `openai_backend` says what is sent and why.

Importing this module imports neither torch nor transformers, and not even openai.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from agents.backends.base import (
    NO_WORDS,
    YES_WORDS,
    Backend,
    BackendError,
    Candidate,
    FinishReason,
    Prompt,
    ServerUnreachableError,
    check_interrupted,
    log_odds,
)

T = TypeVar("T")


#: top-k asked for when the server cannot return the logprobs of chosen token ids.
TOP_LOGPROBS = 20
#: vLLM writes -inf as this number (JSON has no infinity).
VLLM_NEG_INF = -9999.0
_TOKEN_ID_KEY = re.compile(r"^token_id:(\d+)$")
_CHAT_SCORE_WORKERS = 8


class _OpenAIProtocol(Backend):
    """The request half of `OpenAIBackend`, which provides what is declared here."""

    base_url: str
    _client: Any
    _is_vllm: bool

    def _call(self, what: str, request: Callable[[], T], *, retry: bool = True) -> T:
        raise NotImplementedError

    @property
    def _request_model(self) -> str:
        raise NotImplementedError

    def _prompt_ids(self, prompt: Prompt) -> list[int] | None:
        raise NotImplementedError

    def _detokenize(self, ids: Sequence[int]) -> str:
        raise NotImplementedError

    def _leading_special(self) -> tuple[list[int], str | None]:
        raise NotImplementedError

    def _with_lead(self, ids: list[int]) -> list[int]:
        raise NotImplementedError

    def _generate_completions(
        self,
        prompt: Prompt,
        n: int,
        max_tokens: int,
        stop: Sequence[str],
        temperature: float,
        seed: int | None,
        grammar: str | None,
        on_token: Callable[[int, str], None] | None,
    ) -> list[Candidate]:
        ids = self._prompt_ids(prompt)
        if ids is not None:
            if not ids:
                raise BackendError("the prompt is empty")
            self.check_fits(len(ids), max_tokens)
        extra, options = self._sampling_options(stop, seed, grammar)
        request: dict[str, Any] = dict(
            model=self._request_model,
            prompt=ids if ids is not None else str(prompt),
            n=n,
            max_tokens=max_tokens,
            temperature=temperature,
            logprobs=0,
            extra_body=extra or None,
            **options,
        )
        if on_token is not None:
            return self._stream_completions(request, n, on_token)
        reply = self._call(
            "a completion request", lambda: self._client.completions.create(**request)
        )
        candidates = []
        for choice in sorted(reply.choices, key=lambda choice: choice.index):
            extras = choice.model_extra or {}
            logprobs = choice.logprobs
            candidates.append(
                self._candidate(
                    choice.text,
                    extras.get("token_ids"),
                    list(logprobs.tokens or []) if logprobs else [],
                    list(logprobs.token_logprobs or []) if logprobs else [],
                    choice.finish_reason,
                )
            )
        return candidates

    def _stream_completions(
        self, request: dict[str, Any], n: int, on_token: Callable[[int, str], None]
    ) -> list[Candidate]:
        """The same request streamed: each choice's chunks carry its new text, token ids
        and logprobs, assembled here into what the non-streamed reply holds. vLLM holds
        back text that may still become a stop string, so no piece contains it."""
        stream = self._call(
            "a completion request",
            lambda: self._client.completions.create(stream=True, **request),
        )
        texts: list[list[str]] = [[] for _ in range(n)]
        token_ids: list[list[int] | None] = [[] if self._is_vllm else None for _ in range(n)]
        tokens: list[list[str]] = [[] for _ in range(n)]
        values: list[list[float | None]] = [[] for _ in range(n)]
        reasons: list[str | None] = [None] * n

        def read() -> None:
            for chunk in stream:
                check_interrupted()  # the stream closes below: the server stops the request
                for choice in chunk.choices:
                    row = choice.index
                    if not 0 <= row < n:
                        raise BackendError(
                            f"the model server at {self.base_url} streamed a choice {row} of {n}"
                        )
                    delta_ids = (choice.model_extra or {}).get("token_ids")
                    known = token_ids[row]
                    if known is not None:
                        if delta_ids is None:
                            token_ids[row] = None
                        else:
                            known.extend(int(token) for token in delta_ids)
                    if choice.logprobs:
                        tokens[row].extend(choice.logprobs.tokens or [])
                        values[row].extend(choice.logprobs.token_logprobs or [])
                    if choice.finish_reason is not None:
                        reasons[row] = choice.finish_reason
                    if choice.text:
                        texts[row].append(choice.text)
                        on_token(row, choice.text)

        try:
            self._call("the streamed completion", read, retry=False)
        finally:
            stream.close()
        if any(reason is None for reason in reasons):
            raise ServerUnreachableError(
                f"cannot reach the model server at {self.base_url}: the stream ended before "
                "every completion finished"
            )
        return [
            self._candidate("".join(texts[row]), token_ids[row], tokens[row], values[row], reason)
            for row, reason in enumerate(reasons)
        ]

    def _candidate(
        self,
        text: str,
        token_ids: Sequence[int] | None,
        tokens: Sequence[str],
        values: Sequence[float | None],
        finish_reason: str | None,
    ) -> Candidate:
        if token_ids is None:
            token_ids = self._ids_of_tokens(tokens, text)
        return Candidate(
            text=text,
            token_ids=[int(token) for token in token_ids],
            logprobs=[_logprob(value) for value in values],
            finish_reason=_finish(finish_reason),
        )

    def _sampling_options(
        self, stop: Sequence[str], seed: int | None, grammar: str | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(vLLM's extra body, the standard options) shared by completions and chat."""
        extra: dict[str, Any] = {}
        if self._is_vllm:
            extra = {"return_token_ids": True, "return_tokens_as_token_ids": True}
        if grammar is not None:
            # vLLM 0.32's CompletionRequest / ChatCompletionRequest field (StructuredOutputsParams).
            extra["structured_outputs"] = {"grammar": grammar}
        options: dict[str, Any] = {}
        if stop:
            options["stop"] = list(stop)
        if seed is not None:
            options["seed"] = seed
        return extra, options

    def _ids_of_tokens(self, tokens: Sequence[str], text: str) -> list[int]:
        """Token ids from `token_id:N` logprob keys; a server that sends token text instead
        gets the completion re-tokenized (may not line up 1:1 with its logprobs)."""
        parsed = [_TOKEN_ID_KEY.match(token) for token in tokens]
        if parsed and all(parsed):
            return [int(match.group(1)) for match in parsed if match]
        if not text:
            return []
        try:
            return self.tokenize(text)
        except BackendError:
            return []

    def _chat_messages(self, prompt: Prompt) -> list[dict[str, str]]:
        text = prompt if isinstance(prompt, str) else self._detokenize(prompt)
        return [{"role": "user", "content": text}]

    def _generate_chat(
        self,
        prompt: Prompt,
        n: int,
        max_tokens: int,
        stop: Sequence[str],
        temperature: float,
        seed: int | None,
        grammar: str | None,
        on_token: Callable[[int, str], None] | None,
    ) -> list[Candidate]:
        messages = self._chat_messages(prompt)
        extra, options = self._sampling_options(stop, seed, grammar)
        reply = self._call(
            "a chat completion request",
            lambda: self._client.chat.completions.create(
                model=self._request_model,
                messages=messages,  # type: ignore[arg-type]
                n=n,
                max_tokens=max_tokens,
                temperature=temperature,
                logprobs=True,
                extra_body=extra or None,
                **options,
            ),
        )
        candidates = []
        for choice in sorted(reply.choices, key=lambda choice: choice.index):
            extras = choice.model_extra or {}
            content = (choice.logprobs.content or []) if choice.logprobs else []
            candidates.append(
                self._candidate(
                    choice.message.content or "",
                    extras.get("token_ids"),
                    [item.token for item in content],
                    [item.logprob for item in content],
                    choice.finish_reason,
                )
            )
        if on_token is not None:
            # Not streamed: each candidate's text arrives whole, once it is done.
            for row, candidate in enumerate(candidates):
                if candidate.text:
                    on_token(row, candidate.text)
        return candidates

    def _score_completions(
        self, prompts: Sequence[str], yes_ids: list[int], no_ids: list[int]
    ) -> list[float]:
        wanted = sorted({*yes_ids, *no_ids})
        extra: dict[str, Any]
        sent: list[str] | list[list[int]] = list(prompts)
        if self._is_vllm:
            # Text prompts, tokenized by the server exactly as /tokenize does: one request,
            # not one tokenize round trip per prompt. The leading special tokens go as
            # their text (`<bos>`), which the server reads back as those tokens; where
            # that does not hold, each prompt is tokenized here and sent as ids.
            lead, lead_text = self._leading_special()
            if lead and lead_text is None:
                sent = [self._with_lead(self.tokenize(prompt)) for prompt in prompts]
            elif lead_text is not None:
                sent = [p if p.startswith(lead_text) else lead_text + p for p in prompts]
            extra = {
                "logprob_token_ids": wanted,
                "return_tokens_as_token_ids": True,
                "add_special_tokens": False,
            }
            top = len(wanted)
        else:
            extra, top = {}, TOP_LOGPROBS
        reply = self._call(
            "a scoring request",
            lambda: self._client.completions.create(
                model=self._request_model,
                prompt=sent,
                n=1,
                max_tokens=1,
                temperature=0.0,
                logprobs=top,
                extra_body=extra or None,
            ),
        )
        choices = sorted(reply.choices, key=lambda choice: choice.index)
        if len(choices) != len(prompts):
            raise BackendError(
                f"the model server at {self.base_url} answered {len(choices)} scores for "
                f"{len(prompts)} prompts"
            )
        scores = []
        for choice in choices:
            top_logprobs = (choice.logprobs.top_logprobs if choice.logprobs else None) or []
            step = (top_logprobs[0] if top_logprobs else None) or {}
            scores.append(self._log_odds(step.items(), yes_ids, no_ids))
        return scores

    def _score_chat(
        self, prompts: Sequence[str], yes_ids: list[int], no_ids: list[int]
    ) -> list[float]:
        wanted = sorted({*yes_ids, *no_ids})

        def one(prompt: str) -> float:
            extra: dict[str, Any] = {}
            if self._is_vllm:
                extra = {"logprob_token_ids": wanted, "return_tokens_as_token_ids": True}
            reply = self._call(
                "a scoring request",
                lambda: self._client.chat.completions.create(
                    model=self._request_model,
                    messages=self._chat_messages(prompt),  # type: ignore[arg-type]
                    n=1,
                    max_tokens=1,
                    temperature=0.0,
                    logprobs=True,
                    top_logprobs=TOP_LOGPROBS,
                    extra_body=extra or None,
                ),
            )
            choice = reply.choices[0]
            content = (choice.logprobs.content or []) if choice.logprobs else []
            first = content[0].top_logprobs if content else []
            return self._log_odds(((item.token, item.logprob) for item in first), yes_ids, no_ids)

        if len(prompts) == 1:
            return [one(prompts[0])]
        with ThreadPoolExecutor(max_workers=min(_CHAT_SCORE_WORKERS, len(prompts))) as pool:
            return list(pool.map(one, prompts))

    def _log_odds(
        self, entries: Iterable[tuple[str, float]], yes_ids: list[int], no_ids: list[int]
    ) -> float:
        """Sum the yes and no spellings among one position's returned logprobs. Keys are
        `token_id:N` (vLLM) or token text (other servers, matched to the spellings)."""
        yes_set, no_set = set(yes_ids), set(no_ids)
        yes_text, no_text = self._spelling_texts()
        yes: list[float] = []
        no: list[float] = []
        seen: set[str] = set()
        returned: list[float] = []
        for key, raw in entries:
            if key in seen:
                continue
            seen.add(key)
            value = _logprob(raw)
            returned.append(value)
            match = _TOKEN_ID_KEY.match(key)
            if match:
                token = int(match.group(1))
                if token in yes_set:
                    yes.append(value)
                elif token in no_set:
                    no.append(value)
            elif key in yes_text:
                yes.append(value)
            elif key in no_text:
                no.append(value)
        # A side with no spelling among the returned top k has at most the k-th
        # probability: use that bound rather than -inf.
        floor = min(returned) if returned else -math.inf
        if not yes and not no:
            return 0.0
        return log_odds(yes or [floor], no or [floor])

    @staticmethod
    def _spelling_texts() -> tuple[set[str], set[str]]:
        def spellings(words: Sequence[str]) -> set[str]:
            return {form for word in words for form in (word, " " + word)}

        return spellings(YES_WORDS), spellings(NO_WORDS)


def _logprob(value: float | None) -> float:
    """vLLM writes -inf as -9999.0; a missing value (none reported) is -inf too."""
    if value is None or value <= VLLM_NEG_INF:
        return -math.inf
    return float(value)


def _finish(reason: str | None) -> FinishReason:
    return "length" if reason == "length" else "stop"
