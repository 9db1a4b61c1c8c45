"""What the runtime makes of what code returned in the sandbox: the text a block shows,
the meta a node stores, whether an evaluation passed and how much it counts."""

from __future__ import annotations

import math
from typing import Any

from agents.sandbox import CallResult

#: Runtime-written text (tool output, tracebacks, observation views) is clipped to this
#: many characters in a block; the sandbox's own caps still apply to what is stored.
RUNTIME_TEXT_CHARS = 4000


def clip(text: str, limit: int = RUNTIME_TEXT_CHARS) -> str:
    """`text` cut to `limit` characters, keeping its head and tail, with a marker."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters cut ...]\n{text[-tail:]}"


def passed(result: CallResult) -> bool:
    """An evaluation passes when it returns True or a positive number."""
    if not result.ok:
        return False
    value = result.value
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value > 0
    return False


def credit(result: CallResult) -> float:
    """How much an evaluation counts toward the tick's reward: 1 for True, a number
    clamped to [0, 1], 0 for anything else."""
    if not result.ok:
        return 0.0
    value = result.value
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float) and math.isfinite(value):
        return min(1.0, max(0.0, float(value)))
    return 0.0


def result_text(result: CallResult) -> str:
    value = result.value
    text = value if isinstance(value, str) else repr(value)
    extra = ""
    if result.stdout.strip():
        extra += f"\nstdout: {result.stdout.strip()}"
    if result.stderr.strip():
        extra += f"\nstderr: {result.stderr.strip()}"
    return text + extra


def result_meta(result: CallResult) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "ok": result.ok,
        "duration": round(result.duration, 4),
    }
    if result.ok and result.value is not None:
        meta["result"] = result.value
    for key in ("error", "stdout", "stderr", "killed", "finished"):
        value = getattr(result, key)
        if value:
            meta[key] = value
    if result.messages:
        meta["messages"] = list(result.messages)
    return meta


def finite(value: float) -> float:
    """A log-odds score the store can hold: an infinity becomes ±20."""
    return value if math.isfinite(value) else math.copysign(20.0, value)
