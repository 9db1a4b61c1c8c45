"""A training job's progress and events as the CLI and the console print them."""

from __future__ import annotations

import json
import math
import time
from typing import Any

from storage import JobEvent


def format_duration(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "--:--"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_rate(tokens_per_second: float | None) -> str:
    if tokens_per_second is None:
        return "-"
    if tokens_per_second >= 1000:
        return f"{tokens_per_second / 1000:.1f}k"
    return f"{tokens_per_second:.0f}"


def progress_line(data: dict[str, Any], *, width: int = 24) -> str:
    """`[######------]  45% step 90/200 loss 2.314 lr 1.8e-04 1.2k tok/s ETA 1:30`"""
    step = int(data.get("step") or 0)
    total = int(data.get("total_steps") or 0)
    fraction = min(1.0, step / total) if total else 0.0
    filled = round(fraction * width)
    parts = [f"[{'#' * filled}{'-' * (width - filled)}] {fraction * 100:3.0f}%"]
    parts.append(f"step {step}/{total or '?'}")
    if data.get("loss") is not None:
        parts.append(f"loss {data['loss']:.4f}")
    if data.get("learning_rate") is not None:
        parts.append(f"lr {data['learning_rate']:.1e}")
    if data.get("tokens_per_second") is not None:
        parts.append(f"{format_rate(data['tokens_per_second'])} tok/s")
    parts.append(f"ETA {format_duration(data.get('eta_seconds'))}")
    return " ".join(parts)


def event_line(event: JobEvent) -> str:
    """One line for an event, as `train logs` and `--follow` print it."""
    stamp = time.strftime("%H:%M:%S", time.localtime(event.created_at))
    if event.kind == "progress":
        return f"{stamp} progress {progress_line(event.data)}"
    text = event.message or ""
    if not text and event.data:
        text = json.dumps(event.data, sort_keys=True, default=str)
    return f"{stamp} {event.kind} {text}".rstrip()
