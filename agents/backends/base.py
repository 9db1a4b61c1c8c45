"""The one interface every model backend implements, and its typed errors.

A backend turns a prompt into `n` candidate completions with their token ids and
logprobs, and scores yes/no questions as log-odds over the next token. Prompts are plain
text already rendered by the runtime (see `render_chat` for the model's own template);
a prompt may also be given as token ids where exact tokenization matters.

Conventions every backend keeps, so the runtime and the training data don't care which
one ran:
- `Candidate.text` excludes the stop string that ended it (as vLLM does);
  `Candidate.token_ids` are all the tokens the model generated, stop-string tokens
  included, and `logprobs[i]` is the log-probability of `token_ids[i]` under the
  distribution it was sampled from (temperature applied, no top-p/top-k truncation).
- `finish_reason` is "stop" when a stop string or the end-of-sequence token ended the
  completion, "length" when `max_tokens` did.
- With a `grammar`, every completion follows it, and `logprobs` are under the constrained
  distribution actually sampled from: the temperature-scaled logits with every token the
  grammar forbids masked out, renormalised. A completion the grammar has finished ends
  with "stop" (with or without an end-of-sequence token, as the backend samples it).
- With `no_repeat=k`, no run of k tokens that is already in the prompt or earlier in the
  completion is generated again (transformers' NoRepeatNGramLogitsProcessor); where the
  grammar leaves nothing else, the grammar wins. `logprobs` are under that distribution.
- `on_token(index, piece)` streams text while `generate` runs: `index` is the
  candidate's place in the returned list, and the pieces of one candidate add up to its
  `text` (never the stop string). It runs on the generating thread and must be quick; it
  may call `tokenize`, but not `generate` or `score_yes_no`.
- With `greedy_first`, the first of the `n` completions is the greedy one (each step's
  most likely token of the distribution the others are drawn from) and the rest are drawn
  at `temperature`; in one batch where the backend `batches_greedy`, else as a greedy
  request and a sampled one.
- `score_yes_no` sums probability over the single-token spellings of yes and no the
  tokenizer has ("yes", "Yes", "YES", " yes", ...) and returns ln p(yes) - ln p(no).
"""

from __future__ import annotations

import contextlib
import functools
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

FinishReason = Literal["stop", "length"]
Prompt = str | list[int]

YES_WORDS = ("yes", "Yes", "YES")
NO_WORDS = ("no", "No", "NO")


class BackendError(Exception):
    """A model backend failed in a way the user can act on; `str()` is one line."""


class ServerUnreachableError(BackendError):
    """The model server did not answer (down, wrong URL, died mid-request, timed out)."""


class ModelNotFoundError(BackendError):
    """The model is not on disk, not in the cache, and cannot be downloaded."""


class ContextOverflowError(BackendError):
    """Prompt plus completion would not fit the model's context."""


class AdapterError(BackendError):
    """A LoRA adapter could not be loaded or is not known."""


class Interrupted(Exception):
    """The caller stopped the model's work (see `interruptible`); nothing is wrong with
    the backend."""


_caller = threading.local()


@contextlib.contextmanager
def interruptible(should_stop: Callable[[], bool]) -> Iterator[None]:
    """While the body runs on this thread, the model's work checks `should_stop` often
    (an in-process model between its layers, a stream between its pieces) and raises
    `Interrupted` once it is true: a forward pass takes seconds on a CPU, and quitting
    the console must not wait for it."""
    outer = getattr(_caller, "should_stop", None)
    _caller.should_stop = should_stop
    try:
        yield
    finally:
        _caller.should_stop = outer


def check_interrupted() -> None:
    """Raise `Interrupted` when this thread's caller has stopped (see `interruptible`)."""
    should_stop = getattr(_caller, "should_stop", None)
    if should_stop is not None and should_stop():
        raise Interrupted("stopped while the model worked")


@dataclass(frozen=True, slots=True)
class Candidate:
    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: FinishReason


#: Told each step of a slow load, one line at a time (the offline model's conversion).
Progress = Callable[[str], None]
#: A temperature under this samples greedily.
GREEDY_BELOW = 1e-5
#: What each of `Backend.features` lets `generate` do, as a refusal names it.
FEATURE_VERBS = {"stream": "stream text", "grammar": "follow a grammar", "no-repeat": "ban repeats"}


def describe_features(features: Sequence[str]) -> str:
    """("stream", "grammar") -> "stream text or follow a grammar"."""
    verbs = [FEATURE_VERBS.get(feature, feature) for feature in features]
    return verbs[0] if len(verbs) == 1 else ", ".join(verbs[:-1]) + " or " + verbs[-1]


@dataclass(frozen=True, slots=True)
class Sampling:
    """One `generate` call, checked: what a backend's `_generate` samples."""

    n: int
    max_tokens: int
    #: the stop strings, none of them empty
    stop: tuple[str, ...]
    temperature: float
    seed: int | None
    on_token: Callable[[int, str], None] | None
    grammar: str | None
    no_repeat: int
    #: the first completion is greedy (only asked of a backend that `batches_greedy`)
    greedy_first: bool = False


class Backend(ABC):
    """A model the agent can sample from and ask yes/no questions of."""

    #: "transformers", "openai" or "vllm"
    name: str
    #: the model id, path or served name
    model: str
    #: what `generate` can do beyond the basics: "grammar" (structured decoding),
    #: "stream" (`on_token`), "no-repeat" (`no_repeat`); the runtime asks only for what
    #: a backend lists
    features: frozenset[str] = frozenset()
    #: where the model runs: "cpu", "cuda", "mps", or "server" (not known here)
    device: str = "server"
    #: the model's parameter count, where known
    parameters: int | None = None
    #: `generate(greedy_first=True)` samples the greedy row in the same batch as the rest
    batches_greedy: bool = False

    def generate(
        self,
        prompt: Prompt,
        *,
        n: int = 1,
        max_tokens: int = 256,
        stop: Sequence[str] = (),
        temperature: float = 1.0,
        seed: int | None = None,
        on_token: Callable[[int, str], None] | None = None,
        grammar: str | None = None,
        no_repeat: int = 0,
        greedy_first: bool = False,
    ) -> list[Candidate]:
        """`n` sampled completions of `prompt` (greedy when temperature is 0; the first
        of them greedy with `greedy_first`).

        `on_token`, when given, receives (candidate index, new text) as text is produced;
        `grammar` is an EBNF grammar (xgrammar's dialect, root rule `root`) every
        completion must follow; `no_repeat` > 0 bans repeating any run of that many
        tokens of the prompt or the completion (see the module docstring for all three).
        A backend that cannot do one of them raises BackendError rather than ignoring it.

        Checked here for every backend, which then samples the request (`_generate`).
        Greedy candidates are all the same sequence: it is sampled once and given `n`
        times, every piece streamed to each of them."""
        for field_name, value, least in (("n", n, 1), ("max_tokens", max_tokens, 1)):
            if value < least:
                raise BackendError(f"{field_name} must be at least {least}, not {value}")
        if temperature < 0:
            raise BackendError(f"temperature must be 0 or more, not {temperature}")
        if no_repeat < 0:
            raise BackendError(f"no_repeat must be 0 or more, not {no_repeat}")
        asked = {"stream": on_token is not None, "grammar": grammar is not None}
        asked["no-repeat"] = no_repeat > 0
        missing = [feature for feature, wanted in asked.items() if wanted]
        missing = [feature for feature in missing if feature not in self.features]
        if missing:
            raise self.cannot(missing)
        greedy = temperature < GREEDY_BELOW or (greedy_first and n == 1)
        if greedy_first and not greedy and not self.batches_greedy:
            # a greedy request, then the other n - 1 sampled, streamed as rows 1 and on
            ask = functools.partial(
                self.generate, prompt, max_tokens=max_tokens, stop=stop, seed=seed,
                grammar=grammar, no_repeat=no_repeat,
            )  # fmt: skip
            later = None
            if on_token is not None:
                stream = on_token

                def later(index: int, piece: str) -> None:
                    stream(index + 1, piece)

            first = ask(n=1, temperature=0.0, on_token=on_token)
            return first + ask(n=n - 1, temperature=temperature, on_token=later)
        emit = on_token
        if on_token is not None and greedy and n > 1:

            def emit(index: int, piece: str) -> None:
                for row in range(n):
                    on_token(row, piece)

        request = Sampling(
            n=1 if greedy else n,
            max_tokens=max_tokens,
            stop=tuple(text for text in stop if text),
            temperature=0.0 if greedy else temperature,
            seed=seed,
            on_token=emit,
            grammar=grammar,
            no_repeat=no_repeat,
            greedy_first=greedy_first and not greedy,
        )
        candidates = self._generate(prompt, request)
        return candidates * n if greedy else candidates

    @abstractmethod
    def _generate(self, prompt: Prompt, request: Sampling) -> list[Candidate]:
        """`request.n` completions of `prompt` (the request checked by `generate`, its
        features among `features`, its empty stop strings dropped)."""

    def cannot(self, features: Sequence[str]) -> BackendError:
        """The refusal of a request asking for `features` this backend lacks."""
        return BackendError(f"the {self.name} backend cannot {describe_features(features)}")

    @abstractmethod
    def score_yes_no(self, prompts: Sequence[str]) -> list[float]:
        """For each prompt, ln p(yes) - ln p(no) over the next token, in one batch."""

    @abstractmethod
    def tokenize(self, text: str) -> list[int]:
        """Token ids of `text` as the model sees it (no special tokens added)."""

    @abstractmethod
    def render_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        """`messages` through the model's own chat template."""

    @property
    @abstractmethod
    def context_length(self) -> int:
        """The most tokens prompt and completion may take together."""

    @abstractmethod
    def load_adapter(self, name: str, path: str) -> None:
        """Make the LoRA adapter at `path` available as `name` (does not switch to it)."""

    @abstractmethod
    def use_adapter(self, name: str | None) -> None:
        """Sample with adapter `name` from now on; None goes back to the base model."""

    @abstractmethod
    def adapters(self) -> list[str]:
        """Names of the loaded adapters."""

    @property
    @abstractmethod
    def active_adapter(self) -> str | None:
        """The adapter in use, or None for the base model."""

    def close(self) -> None:  # noqa: B027 - backends without resources need nothing
        """Release the model or connection."""

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        if prompt_tokens + max_tokens > self.context_length:
            raise ContextOverflowError(
                f"the prompt has {prompt_tokens} tokens; with {max_tokens} new tokens it "
                f"exceeds the model's context of {self.context_length}"
            )


def one_line(text: object, limit: int = 300) -> str:
    """An error's text squeezed onto one line for the CLI or a notification: whitespace
    runs collapse, and past `limit` characters it is cut with an ellipsis. An exception
    with no text gives its type's name."""
    flat = " ".join(str(text).split())
    if not flat and isinstance(text, BaseException):
        flat = type(text).__name__
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def yes_no_token_ids(encode: Callable[[str], list[int]]) -> tuple[list[int], list[int]]:
    """Ids of every spelling of yes and of no (with and without a leading space) that
    the tokenizer encodes as one token."""

    def single(words: Sequence[str]) -> list[int]:
        ids: set[int] = set()
        for word in words:
            for spelling in (word, " " + word):
                encoded = encode(spelling)
                if len(encoded) == 1:
                    ids.add(encoded[0])
        return sorted(ids)

    yes, no = single(YES_WORDS), single(NO_WORDS)
    if not yes or not no:
        raise BackendError("the tokenizer has no single-token 'yes' or 'no': cannot score")
    return yes, no


def logsumexp(values: Sequence[float]) -> float:
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


def log_odds(yes_logprobs: Sequence[float], no_logprobs: Sequence[float]) -> float:
    """ln(sum p(yes spellings)) - ln(sum p(no spellings)), from per-token logprobs."""
    return logsumexp(yes_logprobs) - logsumexp(no_logprobs)
