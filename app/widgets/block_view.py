"""The selected block (with Python highlighting for code), its score and the parts of
the score, and beside it the candidates it was chosen from."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from agents.events import candidates as count
from agents.safe_text import escape_controls
from storage import Label, Node, Session

from .results import readable_row
from .trace_tree import STATUS_MARKS

CODE_KINDS = {
    "action",
    "debug",
    "expectation",
    "evaluation",
    "observation-inference",
    "backtrack",
    # weave-agent's own kinds (imported traces): Python too
    "bootstrap",
    "task-inference",
}
#: A huge block is shown capped; the whole text stays in the store and the edit dialog.
VIEW_CHARS = 20_000
EMPTY = "Select a block in the tree to see it here."


def capped(text: str) -> tuple[str, bool]:
    """The part of `text` the view shows (controls escaped), and whether it was cut."""
    if len(text) <= VIEW_CHARS:
        return escape_controls(text), False
    return escape_controls(text[:VIEW_CHARS]), True


class BlockView(Static):
    """Header (id, kind, tick, status, author), score and parts, then the text."""

    def show(self, node: Node | None, label: Label | None = None) -> None:
        if node is None:
            self.update(EMPTY)
            return
        self.update(render_block(node, label))

    def show_session(self, session: Session) -> None:
        """A session's line in the tree is highlighted: what it ran, and on what."""
        self.update(session_summary(session))


def render_block(node: Node, label: Label | None) -> RenderableType:
    head = Text(f"#{node.id} {node.kind} · tick {node.tick} · {node.status.value}", style="bold")
    head.append(f" · by {node.author.value}", style="dim")
    if node.edited_from_id is not None:
        head.append(f" · edited from #{node.edited_from_id}", style="dim")
    if node.truncated:
        head.append(" · truncated (never closed)", style="bold")
    if label is not None:
        scope = " (whole path)" if label.scope.value == "path" else ""
        head.append(f" · labelled {label.value.value}{scope}")
        if label.note:
            head.append(f": {label.note}", style="italic")
    parts: list[RenderableType] = [head]
    if node.score is not None:
        score = Text(f"score {node.score:+.2f}", style="bold")
        for name, value in node.score_parts.items():
            score.append(f"   {name} {value:+.2f}", style="dim")
        parts.append(score)
    text, cut = capped(node.text)
    parts.append(Text(""))
    rows = outcome_rows(node) if node.kind == "outcome" else []
    if rows:
        title = text.strip().splitlines()[0] if text.strip() else ""
        if title and not title.startswith("Program: "):
            parts.append(Text(title))  # "Evaluation Results:"
        parts.extend(outcome_view(rows))
    elif node.kind in CODE_KINDS:
        from rich.syntax import Syntax  # pygments: not before the first frame

        parts.append(Syntax(text, "python", word_wrap=True, theme="ansi_dark", line_numbers=False))
    else:
        parts.append(Text(text))
    if cut:
        parts.append(Text(f"[shown: the first {VIEW_CHARS:,} of {len(node.text):,} characters]"))
    return Group(*parts)


def outcome_rows(node: Node) -> list[tuple[str, str]]:
    """An outcome block's programs and their results: as the runtime stored them beside
    the text, or read back from the text (blocks stored before the rows were)."""
    table = node.meta.get("table")
    if not isinstance(table, list):
        from agents.blocks import parse_outcome_table

        table = parse_outcome_table(node.text)
    return [
        (str(row[0]), "" if row[1] is None else str(row[1]))
        for row in table
        if isinstance(row, list | tuple) and len(row) == 2
    ]


def outcome_view(rows: Sequence[tuple[str, str]]) -> list[RenderableType]:
    """Each program's name, then what it gave as text with real line breaks: the block's
    own text (what the model reads) holds reprs, with their line breaks escaped."""
    parts: list[RenderableType] = []
    for program, result in rows:
        parts.append(Text(program, style="bold"))
        shown = readable_row(result)
        parts.append(
            Padding(Text(shown) if shown.strip() else Text("(nothing)", style="dim"), (0, 0, 0, 2))
        )
    return parts


class Candidates(Static):
    """The candidates a block was chosen from: status, score, first line."""

    def show(self, selected: Node | None, candidates: Sequence[Node]) -> None:
        if selected is None or len(candidates) < 2:
            self.update(Text("no other candidates", style="dim"))
            return
        table = Table.grid(padding=(0, 1))
        table.add_column(width=2)
        table.add_column(justify="right")
        table.add_column()
        for node in sorted(candidates, key=lambda n: -(n.score or float("-inf"))):
            mark = STATUS_MARKS.get(node.status, "•")
            first = node.text.strip().splitlines()[0][:40] if node.text.strip() else "(empty)"
            style = "reverse" if node.id == selected.id else ""
            score = f"{node.score:+.2f}" if node.score is not None else "-"
            # One line per candidate: a narrow pane cuts the first line short, never wraps it.
            line = Text(escape_controls(first), style=style, no_wrap=True, overflow="ellipsis")
            table.add_row(Text(mark), Text(score), line)
        self.update(Group(Text(count(len(candidates)), style="bold"), table))


def session_summary(session: Session) -> Group:
    head = Text(f"session #{session.id} · {session.status.value}", style="bold")
    where = " · ".join(
        part
        for part in (
            session.backend or "",
            session.model or "",
            f"adapter {session.adapter}" if session.adapter else "",
        )
        if part
    )
    return Group(head, Text(where, style="dim"), Text(""), Text(session.task.strip()[:4000]))
