"""The openai backend's grammar (vLLM structured outputs) and streaming (`on_token`).

Against the suite's shared vLLM server for the tiny random model (tests/conftest.py),
which left to itself writes noise: a completion that follows a grammar can only come from
the constraint. Streaming is checked against the same request unstreamed (a fixed seed:
the candidates must be identical). How a server failing mid-stream surfaces is checked
against a small stand-in server on a loopback socket, since the shared vLLM server must
stay up.

How `on_token` treats a stop string: vLLM holds back any text that could still become a
stop string and drops the stop string itself, so no piece ever contains it and each row's
pieces concatenate to exactly that candidate's `text` (which excludes it, base.py).
"""

from __future__ import annotations

import http.server
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import pytest

from agents.backends.base import BackendError, Candidate, ServerUnreachableError
from agents.backends.openai_backend import OpenAIBackend
from tests.backends.vllm_server import SERVED_NAME, VLLMServer
from tests.support.scripted_vllm import serving

PROMPT = "#startblock type: action\n"
GRAMMAR = r'root ::= "def f(x):\n    return " [0-9]+ "\n#endblock"'
STOP = ["#endblock"]
SHAPE = re.compile(r"def f\(x\):\n    return [0-9]+\n")


@pytest.fixture(scope="module")
def backend(vllm_server: VLLMServer) -> Iterator[OpenAIBackend]:
    opened = OpenAIBackend(vllm_server.base_url, SERVED_NAME, timeout=60)
    yield opened
    opened.close()


class Pieces:
    """An `on_token` that records every piece per row."""

    def __init__(self) -> None:
        self.rows: dict[int, list[str]] = {}

    def __call__(self, index: int, piece: str) -> None:
        self.rows.setdefault(index, []).append(piece)

    def text(self, index: int) -> str:
        return "".join(self.rows.get(index, []))


def _check_consistent(candidate: Candidate) -> None:
    assert len(candidate.token_ids) == len(candidate.logprobs) >= 1
    assert all(math.isfinite(lp) and lp <= 0 for lp in candidate.logprobs)


# ------------------------------------------------------------- against vLLM


def test_vllm_backend_offers_grammar_and_streaming(backend: OpenAIBackend) -> None:
    assert backend.features == frozenset({"grammar", "stream"})


def test_every_candidate_follows_the_grammar(backend: OpenAIBackend) -> None:
    candidates = backend.generate(
        PROMPT, n=4, max_tokens=128, stop=STOP, temperature=1.0, seed=3, grammar=GRAMMAR
    )
    assert len(candidates) == 4
    for candidate in candidates:
        assert SHAPE.fullmatch(candidate.text), candidate.text
        assert candidate.finish_reason == "stop"
        _check_consistent(candidate)
        # The stop string's tokens are kept, as without a grammar.
        assert backend._detokenize(candidate.token_ids) == candidate.text + "#endblock"
    assert len({c.text for c in candidates}) > 1, "four samples at temperature 1, all equal"


def test_without_the_grammar_the_model_writes_no_such_thing(backend: OpenAIBackend) -> None:
    candidates = backend.generate(PROMPT, n=4, max_tokens=128, stop=STOP, temperature=1.0, seed=3)
    assert len(candidates) == 4
    for candidate in candidates:
        assert not candidate.text.startswith("def f(x):"), candidate.text
        assert not SHAPE.fullmatch(candidate.text)


def test_streamed_pieces_add_up_to_the_same_candidates(backend: OpenAIBackend) -> None:
    """With a grammar that goes on past the stop string, every row is cut by it: its
    pieces still add up to the text, and none holds any of the stop string."""
    grammar = r'root ::= "def f(x):\n    return " [0-9]+ "\n#endblock\nafter the stop"'
    sample = partial(
        backend.generate, PROMPT, n=4, max_tokens=128, stop=STOP, temperature=1.0, seed=11
    )
    pieces = Pieces()
    streamed = sample(grammar=grammar, on_token=pieces)
    plain = sample(grammar=grammar)
    assert streamed == plain
    assert set(pieces.rows) == {0, 1, 2, 3}
    for row, candidate in enumerate(streamed):
        assert SHAPE.fullmatch(candidate.text)
        assert candidate.finish_reason == "stop"
        assert pieces.text(row) == candidate.text
        assert not any("#" in piece for piece in pieces.rows[row])
        assert len(pieces.rows[row]) > 1, "one piece: not streamed"


def test_unconstrained_stream_matches_the_unstreamed_reply(backend: OpenAIBackend) -> None:
    sample = partial(backend.generate, "The agent writes", n=3, max_tokens=24, temperature=1.0)
    pieces = Pieces()
    streamed = sample(seed=5, on_token=pieces)
    plain = sample(seed=5)
    assert streamed == plain
    for row, candidate in enumerate(streamed):
        _check_consistent(candidate)
        assert pieces.text(row) == candidate.text


def test_greedy_stream_feeds_every_repeated_row(backend: OpenAIBackend) -> None:
    # Greedy, the tiny model repeats one digit: the grammar bounds the number.
    grammar = r'root ::= "def f(x):\n    return " [0-9]{1,3} "\n#endblock"'
    pieces = Pieces()
    candidates = backend.generate(
        PROMPT, n=3, max_tokens=32, temperature=0.0, on_token=pieces, grammar=grammar, stop=STOP
    )
    assert candidates[0] == candidates[1] == candidates[2]
    assert SHAPE.fullmatch(candidates[0].text)
    assert all(pieces.text(row) == candidates[0].text for row in range(3))


def test_a_failing_callback_stops_generate_and_the_backend_goes_on(
    backend: OpenAIBackend,
) -> None:
    def fail(index: int, piece: str) -> None:
        raise RuntimeError("the consumer gave up")

    with pytest.raises(RuntimeError, match="gave up"):
        backend.generate(PROMPT, n=2, max_tokens=16, temperature=1.0, on_token=fail)
    after = backend.generate(PROMPT, n=2, max_tokens=8, temperature=1.0, seed=1)
    assert len(after) == 2


# ---------------------------------------------------- a stand-in server, no vLLM


def _chunk(index: int, text: str, finish: str | None = None) -> bytes:
    choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
    body = {"id": "c", "object": "text_completion", "created": 0, "model": "m"}
    return b"data: " + json.dumps({**body, "choices": [choice]}).encode() + b"\n\n"


@contextmanager
def _stand_in(stream_body: bytes, *, complete: bool) -> Iterator[str]:
    """A server that is not vLLM, at the URL yielded: it lists one model and answers every
    completion with `stream_body` as an event stream; unless `complete`, it announces more
    than it sends and hangs up (a server dying mid-stream)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, body: bytes, content_type: str, length: int | None = None) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(length or len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()

        def do_GET(self) -> None:
            listing = {"data": [{"id": "m", "object": "model", "owned_by": "someone"}]}
            self._send(json.dumps(listing).encode(), "application/json")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/completions":  # no /tokenize: not vLLM
                self.send_error(404, "Not Found")
                return
            body = stream_body + (b"data: [DONE]\n\n" if complete else b"")
            self._send(body, "text/event-stream", None if complete else len(body) + 4096)
            self.close_connection = True

    with serving(Handler) as url:
        yield url


def test_other_servers_stream_but_get_no_grammar() -> None:
    body = _chunk(0, "Hel") + _chunk(1, "A") + _chunk(0, "lo", "stop") + _chunk(1, "B", "length")
    with _stand_in(body, complete=True) as url:
        opened = OpenAIBackend(url, "m", timeout=10, max_retries=0)
        assert opened.features == frozenset({"stream"})
        with pytest.raises(BackendError, match="grammar"):
            opened.generate("x", grammar=GRAMMAR)
        pieces = Pieces()
        candidates = opened.generate("x", n=2, max_tokens=4, on_token=pieces)
        assert [c.text for c in candidates] == ["Hello", "AB"]
        assert [c.finish_reason for c in candidates] == ["stop", "length"]
        assert pieces.rows == {0: ["Hel", "lo"], 1: ["A", "B"]}
        opened.close()


def test_a_server_dying_mid_stream_is_unreachable() -> None:
    with _stand_in(_chunk(0, "Hel"), complete=False) as url:
        opened = OpenAIBackend(url, "m", timeout=10, max_retries=2)
        pieces = Pieces()
        with pytest.raises(ServerUnreachableError, match="cannot reach the model server"):
            opened.generate("x", max_tokens=4, on_token=pieces)
        # What arrived before the hang-up was delivered, and nothing was asked twice.
        assert pieces.rows == {0: ["Hel"]}
        opened.close()


def test_an_error_event_mid_stream_is_a_backend_error() -> None:
    error = {"error": {"message": "Internal server error", "type": "InternalServerError"}}
    body = _chunk(0, "Hel") + b"data: " + json.dumps(error).encode() + b"\n\n"
    with _stand_in(body, complete=True) as url:
        opened = OpenAIBackend(url, "m", timeout=10, max_retries=0)
        with pytest.raises(BackendError, match="Internal server error"):
            opened.generate("x", max_tokens=4, on_token=Pieces())
        opened.close()
