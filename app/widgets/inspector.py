"""The inspector: what the agent expected of the tick, what its evaluation callbacks and
logit questions said, and what it observed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from storage import EvaluationKind, EvaluationResult, Node, NodeStatus

from .trace_tree import LOSING

VALUE_CHARS = 80
EMPTY = "The selected tick's expectation, evaluations and observations show here."


def short(value: Any) -> str:
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


class Inspector(Static):
    def show_tick(
        self,
        tick: int | None,
        blocks: Sequence[Node],
        evaluations: Sequence[EvaluationResult],
        error: str = "red",
    ) -> None:
        if tick is None:
            self.update(Text(EMPTY, style="dim"))
            return
        self.update(render_tick(tick, blocks, evaluations, error))


def render_tick(
    tick: int, blocks: Sequence[Node], evaluations: Sequence[EvaluationResult], error: str
) -> RenderableType:
    parts: list[RenderableType] = [Text(f"tick {tick}", style="bold")]
    live = [n for n in blocks if n.status not in LOSING]
    expectations = [n for n in live if n.kind == "expectation"]
    parts.append(Text("expectation", style="bold underline"))
    if expectations:
        parts.append(Text(expectations[-1].text.strip() or "(empty)"))
    else:
        parts.append(Text("none written", style="dim"))

    callbacks = [e for e in evaluations if e.kind is EvaluationKind.CALLBACK]
    parts.append(Text("evaluations", style="bold underline"))
    if callbacks:
        table = Table.grid(padding=(0, 1))
        for result in callbacks:
            if result.error:
                verdict = Text("error", style=f"bold {error}")
                value = Text(short(result.error), style=error)
            elif result.passed:
                verdict, value = Text("pass", style="bold green"), Text(short(result.result))
            else:
                verdict = Text("fail", style=f"bold {error}")
                value = Text(short(result.result))
            took = f"{result.duration * 1000:.0f} ms" if result.duration is not None else ""
            table.add_row(verdict, Text(result.name), value, Text(took, style="dim"))
        parts.append(table)
    else:
        parts.append(Text("none ran", style="dim"))

    questions = [e for e in evaluations if e.kind is EvaluationKind.LOGIT]
    scored = [n for n in live if n.score is not None and "q" in n.meta]
    if questions or scored:
        parts.append(Text("logit questions", style="bold underline"))
        table = Table.grid(padding=(0, 1))
        for result in questions:
            odds = result.result if isinstance(result.result, int | float) else None
            shown = f"{odds:+.2f}" if odds is not None else short(result.result)
            table.add_row(Text(shown, style="bold"), Text(result.name))
        for node in scored:
            table.add_row(
                Text(f"{node.score_parts.get('evaluator', node.score or 0.0):+.2f}", style="bold"),
                Text(f"{node.kind}: {node.meta['q']}"),
            )
        parts.append(table)

    observed = [e for e in evaluations if e.kind is EvaluationKind.OBSERVATION]
    observations = [n for n in live if n.kind == "observation"]
    if observed or observations:
        parts.append(Text("observations", style="bold underline"))
        for node in observations:
            title = node.meta.get("title") or "observation"
            first = node.text.strip().splitlines()[0] if node.text.strip() else "(empty)"
            parts.append(Text(f"{title}: {short(first)}"))
        for result in observed:
            parts.append(Text(f"{result.name}: {short(result.result or result.error)}"))
    failed = [n for n in live if n.status is NodeStatus.FAILED]
    if failed:
        parts.append(Text(f"{len(failed)} action(s) raised", style=f"bold {error}"))
    return Group(*parts)
