"""A stand-in for a vLLM server that writes the blocks a test scripts.

For tests that need a model to write exact text (an attack, say) through the real
`agent-console --query`: the openai backend, the runtime, the sandbox and the store are
all real; only the model is a script. It speaks the part of vLLM's API the openai backend
uses: `/v1/models` (owned by vLLM, with its context length), `/tokenize` and `/detokenize`
(a token per character, and one each for the yes and no spellings), and `/v1/completions`,
streamed or not. A completion is the script's text for the kind of block the prompt's
last header opens; a score is a confident yes, but no to "do the observation views need
to change?" (so no observation-inference block is asked for).
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from agents.backends.base import NO_WORDS, YES_WORDS
from agents.blocks import OPTION_QUESTION

SERVED = "scripted"
#: The yes and no spellings, one token each, past every code point.
WORDS = {word: 0x110000 + i for i, word in enumerate(YES_WORDS + NO_WORDS)}
YES_IDS = [WORDS[word] for word in YES_WORDS]
NO_IDS = [WORDS[word] for word in NO_WORDS]
_HEADER = re.compile(r"#startblock type: ([\w-]+)")


def tokenize(text: str) -> list[int]:
    return [WORDS[text]] if text in WORDS else [ord(char) for char in text]


def detokenize(ids: list[int]) -> str:
    names = {token: word for word, token in WORDS.items()}
    return "".join(names.get(token) or chr(token) for token in ids)


def _choice(index: int, text: str, max_tokens: int | None = None) -> dict[str, Any]:
    """The script's `text` as a completion; cut at `max_tokens`, as vLLM cuts one, with
    the finish reason "length"."""
    ids = tokenize(text)
    cut = max_tokens is not None and len(ids) > max_tokens
    if cut:
        ids = ids[:max_tokens]
        text = detokenize(ids)
    return {
        "index": index,
        "text": text,
        "token_ids": ids,
        "logprobs": {
            "tokens": [f"token_id:{token}" for token in ids],
            "token_logprobs": [-0.1] * len(ids),
            "top_logprobs": None,
            "text_offset": list(range(len(ids))),
        },
        "finish_reason": "length" if cut else "stop",
    }


def _score(index: int, prompt: str) -> dict[str, Any]:
    yes, no = (-3.0, -0.05) if prompt.endswith(OPTION_QUESTION) else (-0.05, -3.0)
    top = {f"token_id:{YES_IDS[0]}": yes, f"token_id:{NO_IDS[0]}": no}
    return {
        "index": index,
        "text": "",
        "logprobs": {"tokens": [], "token_logprobs": [], "top_logprobs": [top], "text_offset": []},
        "finish_reason": "length",
    }


@contextmanager
def scripted_vllm(blocks: Mapping[str, str | Sequence[str]]) -> Iterator[str]:
    """A server writing `blocks[kind]` for every block of that kind (a list: the i-th
    candidate of a request the i-th text, in turn), at the base URL yielded
    (`http://127.0.0.1:PORT/v1`)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _json(self, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                self.send_error(404)
                return
            card = {"id": SERVED, "object": "model", "owned_by": "vllm", "max_model_len": 1 << 20}
            self._json({"object": "list", "data": [card]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if self.path == "/tokenize":
                self._json({"tokens": tokenize(body["prompt"])})
            elif self.path == "/detokenize":
                self._json({"prompt": detokenize(body["tokens"])})
            elif self.path == "/v1/completions":
                self._complete(body)
            else:
                self.send_error(404)

        def _complete(self, body: dict[str, Any]) -> None:
            prompts = body["prompt"]
            if "logprob_token_ids" in body:  # a score for each prompt
                choices = [_score(i, prompt) for i, prompt in enumerate(prompts)]
            else:
                text = detokenize(prompts) if isinstance(prompts[0], int) else prompts
                kind = _HEADER.findall(text)[-1]
                limit = body.get("max_tokens")
                texts = blocks[kind]
                texts = [texts] if isinstance(texts, str) else list(texts)
                n = body.get("n") or 1
                choices = [_choice(i, texts[i % len(texts)], limit) for i in range(n)]
            reply = {"id": "c", "object": "text_completion", "created": 0, "model": SERVED}
            if not body.get("stream"):
                self._json({**reply, "choices": choices})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            for choice in choices:
                self.wfile.write(b"data: " + json.dumps({**reply, "choices": [choice]}).encode())
                self.wfile.write(b"\n\n")
            self.wfile.write(b"data: [DONE]\n\n")
            self.close_connection = True

    with serving(Handler) as url:
        yield url


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """`handler` served on a free loopback port from a thread; yields the /v1 base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
