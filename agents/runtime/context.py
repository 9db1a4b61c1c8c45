"""The context a block is written after: the path rendered, old ticks collapsed until it
fits the model, and what a new block must not copy."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from agents import blocks, forms
from agents.example import EXAMPLE_META, example_bodies
from storage import Node

if TYPE_CHECKING:
    from agents.backends import Backend

#: Tokens kept free beyond what is counted (a BPE merge across a block boundary).
CONTEXT_MARGIN = 8


class Truncated(Exception):
    """The session cannot go on within its limits (the context or its tokens)."""


class ContextWindow:
    """Fits a session's path into `backend`'s context (or `context_tokens`, when set and
    smaller), remembering what it rendered and counted: finished ticks render the same
    text every time they are counted."""

    def __init__(self, backend: Backend, context_tokens: int = 0) -> None:
        self.backend = backend
        self.context_tokens = context_tokens
        self.count_tokens = lru_cache(maxsize=4096)(self.tokens_in)
        # Each block of the path as the context shows it, rendered once (a node that
        # changes is a new object in the path, and is rendered again).
        self._renders: dict[int, tuple[Node, str]] = {}

    def fit(self, path: Sequence[Node], after: str, new_tokens: int) -> tuple[str, list[int]]:
        """The context, with old ticks collapsed as needed so that it, the text `after`
        it and `new_tokens` generated tokens fit the model. A tick that alone overflows
        the model ends the session as truncated."""
        limit = self.backend.context_length
        if self.context_tokens:
            limit = min(limit, self.context_tokens)
        room = limit - new_tokens - CONTEXT_MARGIN
        text = blocks.render_context(path, render=self.render)
        # A token covers at least one byte: bytes bound the tokens from above. `after` is
        # short and new every time (a header with its time), so it is not counted.
        budget = room - len(after.encode("utf-8"))
        if len(text.encode("utf-8")) <= budget:
            return text, []
        text, collapsed, tokens = blocks.fit_context(
            path, budget, self.count_tokens, render=self.render
        )
        if tokens > budget:
            raise Truncated(
                f"the context is full: tick {path[-1].tick} alone does not fit in {limit} tokens"
            )
        return text, collapsed

    def render(self, node: Node) -> str:
        cached = self._renders.get(node.id)
        if cached is None or cached[0] is not node:
            cached = (node, blocks.render_block(node))
            self._renders[node.id] = cached
        return cached[1]

    def tokens_in(self, text: str) -> int:
        return len(self.backend.tokenize(text))


def earlier_texts(path: Sequence[Node], kind: str = "", form: str = forms.CALLBACK) -> list[str]:
    """What a new block of `kind` must not copy: every block of the path (the task, its
    reminders and observations included) and the worked example's blocks. In script form
    an action copies only an earlier action: a whole solution.py says its stub again
    (over 19 HumanEval problems 71 of 108 first actions counted as copies of the task's
    text). A check still copies the action when it says the solution again: cut by the
    token limit, such checks did not parse, where those that only test did."""
    if form == forms.SCRIPT and kind == blocks.ACTION:
        return [n.text for n in path if n.kind == kind]
    texts = [n.text for n in path]
    genesis = path[0] if path else None
    if genesis is not None and isinstance(genesis.meta.get(EXAMPLE_META), int):
        texts += example_bodies(genesis.meta[EXAMPLE_META])
    return texts


def prefix_before(path: Sequence[Node], node: Node) -> str:
    """The exact prompt `node` was written after (context and its own header)."""
    parent_path = path[: path.index(node)] if node in path else path
    return blocks.block_prompt(parent_path, node)
