"""A backend that talks to an OpenAI-compatible server: vLLM first, hosted chat APIs too.

What it sends, and why:
- Completions (`/v1/completions`) by default. A prompt given as text is tokenized first
  (the server's `/tokenize`, or a local tokenizer when `tokenizer=` names one) and sent as
  token ids, so the server sees exactly `tokenize(prompt)`: no re-tokenization of a chat
  template's special tokens, and a token count for `check_fits` before anything is sampled.
- The special tokens the served tokenizer puts before any text (Gemma's `<bos>`; none for
  Qwen) go in front of every prompt that does not already start with them, as the
  transformers backend does: a Gemma model without its `<bos>` writes garbage. They are
  learned once, on first use, by tokenizing one letter with and without special tokens.
- vLLM extensions, only when the server is vLLM (its `/v1/models` says `owned_by: vllm`):
  `return_token_ids` (completion token ids without a second tokenization),
  `return_tokens_as_token_ids` (logprob keys as `token_id:N`, so nothing depends on how a
  token decodes), `logprob_token_ids` (the logprobs of exactly the yes/no spellings), and
  `add_special_tokens: false` for text prompts. Other servers get the plain OpenAI fields.
- `score_yes_no` is ONE completions request for all prompts, `max_tokens=1`, greedy, with
  the logprobs of every single-token yes/no spelling (`logprob_token_ids`), summed by
  `base.log_odds`. On vLLM the prompts go as text, each led by the text of the leading
  special tokens (`<bos>`), which the server's tokenizer reads back as those tokens.
  Servers without `logprob_token_ids` answer with their top-k logprobs (k=20, vLLM's and
  OpenAI's usual maximum): a spelling outside the top k counts as absent, and when every
  spelling of one side is absent its probability is bounded by the k-th logprob, so the
  score stays finite (a bound, not an exact value).
- Chat-only servers (`/v1/completions` answers 404, or `api="chat"`): each prompt goes as one
  user message to `/v1/chat/completions` with `logprobs`/`top_logprobs`. The server's chat
  template then wraps the prompt, so this is an approximation for APIs that allow nothing
  else; scoring sends one request per prompt, concurrently.
- A `grammar` goes as vLLM's structured outputs (`structured_outputs: {"grammar": ...}`,
  xgrammar's EBNF), so `features` lists "grammar" only for vLLM; other servers refuse it.
- `on_token` streams the completions request (`stream=True`, fine with `n > 1`): each
  chunk carries one choice's new text, token ids and logprobs, assembled into the same
  Candidates the unstreamed request gives (same seed, same result). vLLM holds back text
  that may still turn out to be a stop string, so the pieces never contain it and add up
  to `text`. The stream itself is not retried (pieces already delivered cannot be taken
  back): a server dying mid-stream is ServerUnreachableError, an error event in the
  stream BackendError. Chat mode does not stream: each text arrives whole when done.
- vLLM rejects `n > 1` with temperature 0 ("n must be 1 when using greedy sampling"):
  greedy candidates are identical anyway, so one is requested and repeated `n` times.
- Logprobs are what the server reports. vLLM reports the raw (temperature-1) distribution
  unless started with `--logprobs-mode processed_logprobs`, which base.py's convention
  (temperature applied) needs; `agent-console serve` and the tests start it that way.

Errors become base.py's typed errors with one-line messages: no answer, a refused or reset
connection, a timeout or a dead engine -> ServerUnreachableError ("cannot reach the model
server at URL: ..."); a context-length 400 -> ContextOverflowError; an unknown model ->
ModelNotFoundError; an unknown or unloadable adapter -> AdapterError. Connection failures
and 502/503/504 are retried `max_retries` times with exponential backoff (0.5 s, 1 s,
2 s, ... capped at 8 s); a timeout is not retried (a slow server would only be asked
again to be slow), and neither is any other status.

Importing this module imports neither torch nor transformers, and not even openai: the
client is created in the constructor, a local tokenizer on first use.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

from agents.backends.base import (
    AdapterError,
    BackendError,
    Candidate,
    ContextOverflowError,
    ModelNotFoundError,
    Prompt,
    Sampling,
    ServerUnreachableError,
    describe_features,
    one_line,
    yes_no_token_ids,
)
from agents.backends.openai_protocol import _OpenAIProtocol

if TYPE_CHECKING:
    import openai

T = TypeVar("T")
ApiKind = Literal["auto", "completions", "chat"]

_CONTEXT_WORDS = ("maximum context length", "max_model_len", "context length", "context_length")
_RETRY_STATUSES = frozenset({502, 503, 504})
_BACKOFF_START, _BACKOFF_CAP = 0.5, 8.0


class _EndpointMissing(BackendError):
    """The server has no such route (a bare 404): callers fall back or explain."""


def _split_base_url(base_url: str) -> tuple[str, str]:
    """(the OpenAI API root that clients take, the server root that vLLM's /tokenize and
    /health hang off). A bare host gets /v1, as every OpenAI-compatible server uses it."""
    url = base_url.strip().rstrip("/")
    if not url:
        raise BackendError("the openai backend needs a base URL, e.g. http://127.0.0.1:8000/v1")
    if "://" not in url:
        url = "http://" + url
    path = urlsplit(url).path
    if path in ("", "/"):
        return url + "/v1", url
    if path.endswith("/v1"):
        return url, url[: -len("/v1")]
    return url, url


class OpenAIBackend(_OpenAIProtocol):
    """A model served over the OpenAI API (vLLM's server, or a hosted API).

    `model` is the served name; empty picks the server's only (or first) base model.
    `tokenizer` is a local tokenizer folder or hub id for the same model: it makes
    tokenization and chat rendering local (no round trip) and is required for those on
    servers other than vLLM. `api` forces completions or chat; "auto" uses completions and
    falls back to chat when the server has no completions endpoint.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        tokenizer: str | None = None,
        api: ApiKind = "auto",
    ) -> None:
        import openai

        if api not in ("auto", "completions", "chat"):
            raise BackendError(f"unknown api {api!r}: use 'auto', 'completions' or 'chat'")
        if timeout <= 0:
            raise BackendError("the request timeout must be positive")
        self.base_url, self.root_url = _split_base_url(base_url)
        self.timeout = float(timeout)
        self.max_retries = max(0, int(max_retries))
        self._api: ApiKind = api
        self._tokenizer_path = tokenizer
        self._hf_tokenizer: Any = None
        self._yes_no: tuple[list[int], list[int]] | None = None
        self._lead: tuple[list[int], str | None] | None = None
        self._adapter: str | None = None
        self._openai = openai
        # Retries are ours (see the module docstring), so the client makes none.
        self._client = openai.OpenAI(
            base_url=self.base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=self.timeout,
            max_retries=0,
        )
        cards = self._model_cards()
        self._is_vllm = any(card.get("owned_by") == "vllm" for card in cards)
        # Grammars go as vLLM's `structured_outputs`, which other servers do not have.
        self.features = frozenset({"stream", "grammar"} if self._is_vllm else {"stream"})
        self._max_model_len: int | None = None
        self.model = model.strip()
        if cards:
            bases = [card for card in cards if not card.get("parent")]
            if not self.model:
                if not bases:
                    raise ModelNotFoundError(f"the model server at {self.base_url} serves no model")
                self.model = str(bases[0]["id"])
            by_id = {str(card.get("id")): card for card in cards}
            if self.model not in by_id:
                served = ", ".join(sorted(by_id)) or "nothing"
                raise ModelNotFoundError(
                    f"the model server at {self.base_url} does not serve {self.model!r} "
                    f"(it serves: {one_line(served, 200)})"
                )
            length = by_id[self.model].get("max_model_len")
            if isinstance(length, int) and length > 0:
                self._max_model_len = length
        elif not self.model:
            raise ModelNotFoundError(
                f"the model server at {self.base_url} does not list its models: name one"
            )

    # ----------------------------------------------------------------- requests

    def _call(self, what: str, request: Callable[[], T], *, retry: bool = True) -> T:
        """Run one request with retries, turning every failure into a typed error.
        `retry=False` for reading a stream: what it already delivered cannot be taken back."""
        openai = self._openai
        attempts = self.max_retries + 1 if retry else 1
        for attempt in range(attempts):
            try:
                return request()
            except openai.APITimeoutError:
                raise ServerUnreachableError(
                    f"cannot reach the model server at {self.base_url}: no answer to "
                    f"{what} within {self.timeout:g} s"
                ) from None
            except openai.APIConnectionError as error:
                if attempt + 1 < attempts:
                    time.sleep(min(_BACKOFF_START * 2**attempt, _BACKOFF_CAP))
                    continue
                cause = error.__cause__ or error
                raise ServerUnreachableError(
                    f"cannot reach the model server at {self.base_url}: "
                    f"{one_line(str(cause) or type(cause).__name__, 160)} "
                    f"({attempts} attempt{'s' if attempts > 1 else ''})"
                ) from None
            except openai.APIStatusError as error:
                if error.status_code in _RETRY_STATUSES and attempt + 1 < attempts:
                    time.sleep(min(_BACKOFF_START * 2**attempt, _BACKOFF_CAP))
                    continue
                raise self._status_error(error, what) from None
            except openai.APIError as error:
                # An error event inside a stream (vLLM sends `data: {"error": ...}`).
                message = one_line(error.message)
                if "enginecore" in message.lower() or "dead" in message.lower():
                    raise ServerUnreachableError(
                        f"cannot reach the model server at {self.base_url}: its engine died "
                        f"during {what} ({message})"
                    ) from None
                raise BackendError(
                    f"the model server at {self.base_url} failed during {what}: {message}"
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _status_error(self, error: openai.APIStatusError, what: str) -> BackendError:
        body = error.body
        message = ""
        if isinstance(body, Mapping):
            inner = body.get("error", body)
            if isinstance(inner, Mapping):
                message = str(inner.get("message") or inner.get("detail") or "")
            else:
                message = str(inner)
        message = one_line(message or error.message)
        status = error.status_code
        lowered = message.lower()
        where = f"the model server at {self.base_url}"
        if status == 404 and lowered in ("not found", "none", ""):
            return _EndpointMissing(f"{where} has no endpoint for {what}")
        if status in (400, 413, 422) and any(word in lowered for word in _CONTEXT_WORDS):
            return ContextOverflowError(f"{where} refused {what}: {message}")
        if status == 404 and "does not exist" in lowered and "model" in lowered:
            if self._adapter is not None:
                return AdapterError(
                    f"{where} no longer has adapter {self._adapter!r} (restarted?): {message}"
                )
            return ModelNotFoundError(f"{where} does not serve {self.model!r}: {message}")
        if status in (401, 403):
            return BackendError(f"{where} refused the API key ({status}): {message}")
        if status >= 500 and "dead" in lowered:
            return ServerUnreachableError(
                f"cannot reach the model server at {self.base_url}: its engine died ({message})"
            )
        return BackendError(f"{where} answered {what} with {status}: {message}")

    def _post_root(self, path: str, body: Mapping[str, Any], what: str) -> Any:
        """POST to a route outside /v1 (vLLM's /tokenize, /detokenize)."""
        url = f"{self.root_url}{path}"
        return self._call(what, lambda: self._client.post(url, cast_to=object, body=body))

    def _model_cards(self) -> list[dict[str, Any]]:
        try:
            listing = self._call(
                "the model list", lambda: self._client.get("/models", cast_to=object)
            )
        except _EndpointMissing:
            return []
        data = listing.get("data") if isinstance(listing, Mapping) else None
        return [dict(card) for card in data or [] if isinstance(card, Mapping)]

    @property
    def _request_model(self) -> str:
        return self._adapter or self.model

    # ------------------------------------------------------------- tokenizer

    def _local_tokenizer(self) -> Any:
        if self._hf_tokenizer is None and self._tokenizer_path:
            try:
                from transformers import AutoTokenizer

                self._hf_tokenizer = AutoTokenizer.from_pretrained(self._tokenizer_path)
            except (OSError, ValueError) as error:
                raise ModelNotFoundError(
                    f"cannot load the tokenizer {self._tokenizer_path!r}: {one_line(str(error))}"
                ) from None
        return self._hf_tokenizer

    def tokenize(self, text: str) -> list[int]:
        return self._encode(text, add_special_tokens=False)

    def _encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        local = self._local_tokenizer()
        if local is not None:
            return list(local.encode(text, add_special_tokens=add_special_tokens))
        try:
            reply = self._post_root(
                "/tokenize",
                {"model": self.model, "prompt": text, "add_special_tokens": add_special_tokens},
                "tokenize",
            )
        except _EndpointMissing:
            raise BackendError(
                f"the model server at {self.base_url} cannot tokenize (no /tokenize, so not "
                "vLLM): pass a local tokenizer (tokenizer=PATH or hub id of the same model)"
            ) from None
        return [int(token) for token in reply["tokens"]]

    def _detokenize(self, ids: Sequence[int]) -> str:
        local = self._local_tokenizer()
        if local is not None:
            return str(local.decode(list(ids), skip_special_tokens=False))
        try:
            reply = self._post_root(
                "/detokenize", {"model": self.model, "tokens": list(ids)}, "detokenize"
            )
        except _EndpointMissing:
            raise BackendError(
                f"the model server at {self.base_url} cannot detokenize (not vLLM): pass a "
                "local tokenizer (tokenizer=PATH or hub id of the same model)"
            ) from None
        return str(reply["prompt"])

    def _leading_special(self) -> tuple[list[int], str | None]:
        """(the ids of the special tokens the served tokenizer puts before any text, their
        text when tokenizing that text gives back exactly those ids, else None). Learned
        once; nothing for a server that cannot tokenize, which adds its own."""
        if self._lead is None:
            if self._local_tokenizer() is None and not self._is_vllm:
                self._lead = ([], None)
                return self._lead
            plain = self._encode("a", add_special_tokens=False)
            full = self._encode("a", add_special_tokens=True)
            ids: list[int] = []
            if len(full) > len(plain) and full[len(full) - len(plain) :] == plain:
                ids = full[: len(full) - len(plain)]
            text: str | None = None
            if ids:
                text = self._detokenize(ids)
                if self.tokenize(text + "a") != ids + plain:
                    text = None
            self._lead = (ids, text)
        return self._lead

    def _with_lead(self, ids: list[int]) -> list[int]:
        lead, _ = self._leading_special()
        if lead and ids[: len(lead)] != lead:
            return lead + ids
        return ids

    def render_chat(
        self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        """The local tokenizer's template when given; else vLLM renders it (/tokenize with
        messages, then /detokenize, which keeps special tokens): the server's own template,
        exactly, for byte-level tokenizers such as Qwen2's."""
        local = self._local_tokenizer()
        if local is not None:
            return str(
                local.apply_chat_template(
                    list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
                )
            )
        try:
            reply = self._post_root(
                "/tokenize",
                {
                    "model": self.model,
                    "messages": list(messages),
                    "add_generation_prompt": add_generation_prompt,
                },
                "render the chat template",
            )
        except _EndpointMissing:
            raise BackendError(
                f"the model server at {self.base_url} cannot render chat templates (not "
                "vLLM): pass a local tokenizer (tokenizer=PATH or hub id of the same model)"
            ) from None
        return self._detokenize([int(token) for token in reply["tokens"]])

    @property
    def context_length(self) -> int:
        if self._max_model_len is not None:
            return self._max_model_len
        local = self._local_tokenizer()
        length = getattr(local, "model_max_length", None)
        if isinstance(length, int) and 0 < length < 10**7:
            return length
        raise BackendError(
            f"the model server at {self.base_url} does not report {self.model!r}'s context "
            "length: pass a local tokenizer that records it"
        )

    # ---------------------------------------------------------------- generate

    def _generate(self, prompt: Prompt, request: Sampling) -> list[Candidate]:
        asked = (
            prompt,
            request.n,
            request.max_tokens,
            list(request.stop),
            request.temperature,
            request.seed,
            request.grammar,
            request.on_token,
        )
        if self._api != "chat":
            try:
                return self._generate_completions(*asked)
            except _EndpointMissing:
                if self._api == "completions":
                    raise
                self._api = "chat"
        return self._generate_chat(*asked)

    def cannot(self, features: Sequence[str]) -> BackendError:
        only = "; only vLLM's structured outputs are supported" if "grammar" in features else ""
        return BackendError(
            f"the model server at {self.base_url} cannot {describe_features(features)}{only}"
        )

    def _prompt_ids(self, prompt: Prompt) -> list[int] | None:
        """Token ids of the prompt, led by the tokenizer's leading special tokens, or None
        when the server cannot tokenize (then the text goes as is and the server tokenizes
        it, adding what it adds)."""
        if not isinstance(prompt, str):
            ids = [int(token) for token in prompt]
        elif self._local_tokenizer() is None and not self._is_vllm:
            return None
        else:
            ids = self.tokenize(prompt)
        return self._with_lead(ids) if ids else ids

    # ------------------------------------------------------------------- score

    def _yes_no_ids(self) -> tuple[list[int], list[int]]:
        if self._yes_no is None:
            self._yes_no = yes_no_token_ids(self.tokenize)
        return self._yes_no

    def score_yes_no(self, prompts: Sequence[str]) -> list[float]:
        if not prompts:
            return []
        if self._is_vllm or self._local_tokenizer() is not None:
            yes_ids, no_ids = self._yes_no_ids()
        else:
            # No way to tokenize: the spellings are matched by their text alone.
            yes_ids, no_ids = [], []
        if self._api != "chat":
            try:
                return self._score_completions(prompts, yes_ids, no_ids)
            except _EndpointMissing:
                if self._api == "completions":
                    raise
                self._api = "chat"
        return self._score_chat(prompts, yes_ids, no_ids)

    # ---------------------------------------------------------------- adapters

    def load_adapter(self, name: str, path: str) -> None:
        """Ask the server to load the adapter at `path` (a path on the server's machine;
        resolved here when it exists here). Loading a name again replaces it in place."""
        if not name.strip():
            raise AdapterError("an adapter needs a name")
        if name == self.model:
            raise AdapterError(f"an adapter cannot take the base model's name {name!r}")
        local = Path(path).expanduser()
        server_path = str(local.resolve()) if local.exists() else str(path)
        body: dict[str, Any] = {"lora_name": name, "lora_path": server_path}
        if name in self.adapters():
            body["load_inplace"] = True
        try:
            self._call(
                f"loading adapter {name!r}",
                lambda: self._client.post("/load_lora_adapter", cast_to=str, body=body),
            )
        except _EndpointMissing:
            raise AdapterError(
                f"the model server at {self.base_url} cannot load adapters at run time: "
                "start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
            ) from None
        except (ServerUnreachableError, AdapterError):
            raise
        except BackendError as error:
            raise AdapterError(
                f"cannot load adapter {name!r} from {server_path}: {error}"
            ) from None

    def use_adapter(self, name: str | None) -> None:
        if name is not None and name not in self.adapters():
            loaded = ", ".join(self.adapters()) or "none"
            raise AdapterError(f"no adapter named {name!r} is loaded (loaded: {loaded})")
        self._adapter = name

    def adapters(self) -> list[str]:
        """The adapters the server has for this model, whoever loaded them (its
        `/v1/models` lists them with the base model as parent)."""
        return sorted(
            str(card["id"]) for card in self._model_cards() if card.get("parent") == self.model
        )

    @property
    def active_adapter(self) -> str | None:
        return self._adapter

    def close(self) -> None:
        self._client.close()


__all__ = ["OpenAIBackend"]
