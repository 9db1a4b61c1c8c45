"""One backend, two adapters at once: `PinnedAdapter` is the console's model with one side's
adapter switched in for each call, under a lock every side shares (and the previous one put
back), so two sessions can run on one model at the same time, interleaved call by call,
and every call sees its own side's adapter. The A/B comparisons (`training.ab`, the
console's A/B screens) run their sides through it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

from agents.backends.base import AdapterError, Backend, Candidate, Prompt, Sampling

T = TypeVar("T")


class PinnedAdapter(Backend):
    """`inner` with `adapter` (None: the base model) in use for every call made through
    it. The switch and the call happen under `lock`, shared by every side of a comparison,
    so sides running at once never sample with each other's adapter."""

    def __init__(self, inner: Backend, adapter: str | None, lock: threading.Lock) -> None:
        self.inner = inner
        self.adapter = adapter
        self.lock = lock
        self.name = inner.name
        self.model = inner.model
        self.features = inner.features
        self.batches_greedy = inner.batches_greedy
        self.device = inner.device
        self.parameters = inner.parameters

    def _pinned(self, call: Callable[[], T]) -> T:
        with self.lock:
            previous = self.inner.active_adapter
            if previous != self.adapter:
                self.inner.use_adapter(self.adapter)
            try:
                return call()
            finally:
                if self.inner.active_adapter != previous:
                    self.inner.use_adapter(previous)

    def _generate(self, prompt: Prompt, request: Sampling) -> list[Candidate]:
        # checked by `generate` already, against the same features
        return self._pinned(lambda: self.inner._generate(prompt, request))

    def score_yes_no(self, prompts: Sequence[str]) -> list[float]:
        return self._pinned(lambda: self.inner.score_yes_no(prompts))

    def tokenize(self, text: str) -> list[int]:
        return self.inner.tokenize(text)

    def render_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        return self.inner.render_chat(messages, add_generation_prompt=add_generation_prompt)

    @property
    def context_length(self) -> int:
        return self.inner.context_length

    def load_adapter(self, name: str, path: str) -> None:
        raise AdapterError("a comparison side's adapter is fixed for the run")

    def use_adapter(self, name: str | None) -> None:
        if name != self.adapter:
            raise AdapterError("a comparison side's adapter is fixed for the run")

    def adapters(self) -> list[str]:
        return self.inner.adapters()

    @property
    def active_adapter(self) -> str | None:
        return self.adapter

    def close(self) -> None:
        """The console's model outlives the comparison: nothing to release."""
