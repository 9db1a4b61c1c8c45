"""The inspector: what the agent expected of the tick, what its evaluation callbacks and
logit questions said, and what it observed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.widgets import Static
from textual.worker import Worker

from agents.safe_text import escape_controls
from storage import (
    EvaluationKind,
    EvaluationResult,
    Node,
    NodeStatus,
    check_verdict,
    count_checks,
)

from .results import capped_lines, preview, readable
from .trace_tree import LOSING, SessionTrace

if TYPE_CHECKING:
    from storage.views import Trees

VALUE_CHARS = 80
EMPTY = "The selected tick's expectation, evaluations and observations show here."


def short(value: Any) -> str:
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    text = escape_controls(" ".join(text.split()))
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


class Inspector(Static):
    """The selected tick: its expectation, its checks and the evaluator's questions, with
    their evaluations read from the store (from a thread worker)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        #: the (session, tick) shown or being read; None: nothing
        self.showing: tuple[int, int] | None = None
        #: what the evaluations are read from, once the store is open
        self.store: Trees | None = None

    def inspect(self, trace: SessionTrace, tick: int, *, force: bool = False) -> None:
        """Show `tick` of `trace` (again with `force`: its blocks or checks changed)."""
        key = (trace.session.id, tick)
        if key == self.showing and not force:
            return
        self.showing = key
        self.load_inspector(key, trace.tick_blocks(tick))

    def clear(self) -> None:
        self.showing = None
        self.show_tick(None, [], [])

    @work(thread=True, exclusive=True, exit_on_error=False, group="inspector")
    def load_inspector(self, key: tuple[int, int], blocks: list[Node]) -> None:
        if self.store is None:
            return
        evaluations = self.store.evaluations_for([n.id for n in blocks])
        self.app.call_from_thread(self._read, key, blocks, evaluations)

    def _read(
        self, key: tuple[int, int], blocks: list[Node], evaluations: list[EvaluationResult]
    ) -> None:
        if key == self.showing:
            self.show_tick(key[1], blocks, evaluations, self.app.current_theme.error or "red")

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        from app.shared import report_failure

        report_failure(self, event)

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
        parts.append(Text(escape_controls(expectations[-1].text.strip()) or "(empty)"))
    else:
        parts.append(Text("none written", style="dim"))

    parts.extend(checks(evaluations, error))

    questions = [e for e in evaluations if e.kind is EvaluationKind.LOGIT]
    scored = [n for n in live if n.score is not None and "q" in n.meta]
    if questions or scored:
        parts.append(Text("logit questions", style="bold underline"))
        table = Table.grid(padding=(0, 1))
        for result in questions:
            odds = result.result if isinstance(result.result, int | float) else None
            shown = f"{odds:+.2f}" if odds is not None else short(result.result)
            table.add_row(Text(shown, style="bold"), Text(escape_controls(result.name)))
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
            parts.append(Text(f"{escape_controls(title)}: {short(first)}"))
        for result in observed:
            parts.append(
                Text(f"{escape_controls(result.name)}: {short(result.result or result.error)}")
            )
    failed = [n for n in live if n.status is NodeStatus.FAILED]
    if failed:
        parts.append(Text(f"{len(failed)} action(s) raised", style=f"bold {error}"))
    return Group(*parts)


def checks(evaluations: Sequence[EvaluationResult], error: str) -> list[RenderableType]:
    """The tick's evaluation callbacks: a heading with the count the tree shows too, one
    row each (verdict as a word, name, a one-line preview, time taken), then the whole
    text of each check that did not pass and has more to say than its row."""
    callbacks = [e for e in evaluations if e.kind is EvaluationKind.CALLBACK]
    if not callbacks:
        return [Text("evaluations", style="bold underline"), Text("none ran", style="dim")]
    counts = count_checks(callbacks)
    heading = Text.assemble(
        ("evaluations", "bold underline"),
        "  ",
        (counts.summary(), "green" if counts.all_passed else error),
    )
    table = Table.grid(padding=(0, 1))
    details: list[RenderableType] = []
    for result in callbacks:
        name = escape_controls(result.name)
        verdict = check_verdict(result)
        text = result.error if result.error is not None else readable(result.result)
        # what went wrong is said last: a traceback's exception, a test run's summary
        shown = preview(text, VALUE_CHARS, last=verdict != "pass")
        style = "bold green" if verdict == "pass" else f"bold {error}"
        took = f"{result.duration * 1000:.0f} ms" if result.duration is not None else ""
        value = Text(shown, style=error if verdict == "error" else "")
        table.add_row(Text(verdict, style=style), Text(name), value, Text(took, style="dim"))
        if verdict != "pass" and text.strip() and shown != text.strip():
            details.append(Text(f"{name}: {verdict}", style=f"bold {error}"))
            details.append(Padding(Text("\n".join(capped_lines(text))), (0, 0, 0, 2)))
    return [heading, table, *details]
