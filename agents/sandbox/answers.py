"""What one call did (`CallResult`), and the answer frames it is read from.

Requests and answers are length-prefixed JSON (a 4-byte big-endian length, then UTF-8
JSON) on two dedicated pipes, never stdout: block code owns that. Block code can also write
to the response pipe, so an answer is trusted for nothing: an oversized or malformed frame
is a protocol error, and none of an answer's types are taken on faith.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import Any

from agents.sandbox import kernel as kernel_module

_HEADER = struct.Struct(">I")


@dataclass
class CallResult:
    """What one call into the kernel did."""

    ok: bool
    """The code or callback ran without raising and the kernel survived."""
    value: Any = None
    """Its JSON-safe return value (a value JSON cannot hold comes back as its repr())."""
    error: str | None = None
    """The traceback (model code's frames only, capped), or why the kernel died."""
    stdout: str = ""
    """Captured output, capped; a cut one ends with a marker like "[... 98.2 MB dropped]"."""
    stderr: str = ""
    messages: list[str] = field(default_factory=list)
    """`self.tell_operator()` texts sent during the call."""
    duration: float = 0.0
    """Seconds, as the host saw them."""
    killed: str | None = None
    """Why the kernel died during the call ("timeout", "cpu", "memory", "crashed", "disk",
    "output", "closed"); it is then dead until `restart()`."""
    registered: dict[str, list[str]] = field(default_factory=dict)
    """Titles added during the call, by kind: action, evaluation, observation, and
    removed_observation."""
    finished: str | None = None
    """The message, if the code called `self.finish(message)`."""


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _parse_frame(body: bytes) -> dict[str, Any] | None:
    """One answer frame as an object, or None when it is not one the console takes: not
    UTF-8 JSON, not an object, a lone surrogate, NaN or an infinity, a number of over
    4,300 digits, or nested deeper than the kernel sends (a value `kernel.MAX_DEPTH` deep
    in the answer)."""
    try:
        value = json.loads(body, parse_constant=_reject_constant)
        # a lone surrogate (a "\\ud800" escape) is no text the store can write
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, RecursionError):  # UnicodeError is a ValueError
        return None
    if not isinstance(value, dict) or kernel_module.too_deep(value, kernel_module.MAX_DEPTH + 1):
        return None
    return value


def _result_from(response: dict[str, Any]) -> CallResult:
    """A CallResult from the kernel's answer, trusting none of its types (block code can
    forge answers)."""

    def text(value: Any) -> str:
        return value if isinstance(value, str) else ""

    messages = response.get("messages")
    registered = response.get("registered")
    return CallResult(
        ok=response.get("ok") is True,
        value=response.get("value"),
        error=response["error"] if isinstance(response.get("error"), str) else None,
        stdout=text(response.get("stdout")),
        stderr=text(response.get("stderr")),
        messages=[m for m in messages if isinstance(m, str)] if isinstance(messages, list) else [],
        registered={
            str(kind): [t for t in titles if isinstance(t, str)]
            for kind, titles in registered.items()
            if isinstance(titles, list)
        }
        if isinstance(registered, dict)
        else {},
        finished=response["finished"] if isinstance(response.get("finished"), str) else None,
    )
