"""The console's main screen: browse stored sessions as a tree of ticks and blocks.

The store is read in thread workers; the tree is lazy (a session's blocks are loaded
when it is expanded), so a large store opens as fast as an empty one.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby
from typing import TYPE_CHECKING

from rich.syntax import Syntax
from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Footer, Header, Static, Tree
from textual.widgets.tree import TreeNode
from textual.worker import Worker, WorkerState

from agents.settings import Settings

if TYPE_CHECKING:
    from agents.backends import Backend
from app.themes import load_themes
from storage import Label, LabelValue, Node, NodeStatus, Session, TraceStore

CODE_KINDS = {"action", "debug", "expectation", "evaluation", "observation-inference", "backtrack"}
STATUS_MARKS = {
    NodeStatus.APPROVED: "✔",
    NodeStatus.EDITED: "✎",
    NodeStatus.REJECTED: "✘",
    NodeStatus.FAILED: "!",
    NodeStatus.ALTERNATE: "⋯",
}
FALLBACK_THEME = "textual-dark"


@dataclass(frozen=True)
class SessionEntry:
    session: Session


@dataclass(frozen=True)
class BlockEntry:
    node: Node
    label: Label | None


def block_label(node: Node, label: Label | None) -> Text:
    text = Text()
    if label is not None:
        good = label.value is LabelValue.GOOD
        text.append("+ " if good else "- ", style="bold green" if good else "bold red")
    mark = STATUS_MARKS.get(node.status)
    if mark:
        text.append(f"{mark} ", style="red" if node.status is NodeStatus.FAILED else "dim")
    text.append(node.kind, style="dim" if node.status is NodeStatus.ALTERNATE else "")
    first = node.text.strip().splitlines()[0][:60] if node.text.strip() else ""
    if first:
        text.append(f"  {first}", style="dim")
    return text


class BlockView(Static):
    """The selected block: its header (kind, status, score and parts) and its text."""

    def show(self, entry: BlockEntry | None) -> None:
        if entry is None:
            self.update("Select a block to see it here.")
            return
        node, label = entry.node, entry.label
        head = Text(
            f"#{node.id} {node.kind} · tick {node.tick} · {node.status.value}", style="bold"
        )
        if node.score is not None:
            parts = ", ".join(f"{k} {v:+.2f}" for k, v in node.score_parts.items())
            head.append(f" · score {node.score:+.2f}" + (f" ({parts})" if parts else ""))
        if label is not None:
            head.append(f" · labelled {label.value.value}")
        body = (
            Syntax(node.text, "python", word_wrap=True, theme="ansi_dark")
            if node.kind in CODE_KINDS
            else Text(node.text)
        )
        from rich.console import Group

        self.update(Group(head, Text(""), body))


class ConsoleApp(App[None]):
    CSS_PATH = "console.tcss"
    TITLE = "agent-console"
    BINDINGS = [
        Binding("q", "quit", "Quit", id="app.quit", tooltip="Leave the console"),
        Binding(
            "r", "refresh", "Refresh", id="app.refresh", tooltip="Reload sessions from the store"
        ),
    ]

    def __init__(self, *, store: TraceStore, settings: Settings) -> None:
        super().__init__()
        self.store = store
        self.settings = settings
        self.sub_title = store.where

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            tree: Tree[SessionEntry | BlockEntry | None] = Tree("sessions", id="trace-tree")
            tree.show_root = False
            yield tree
            with VerticalScroll(id="block-pane"):
                yield BlockView("Select a block to see it here.", id="block-view")
        yield Footer()

    def on_mount(self) -> None:
        self.apply_theme()
        self.apply_keymap()
        self.query_one("#trace-tree", Tree).focus()
        self.load_sessions()
        self.backend: Backend | None = None
        if self.settings.backend != "none":
            self.sub_title = f"{self.store.where} · loading model…"
            self.load_model()

    @work(thread=True, exclusive=True, exit_on_error=False, group="model")
    def load_model(self) -> None:
        """After the first frame: a real model takes seconds to minutes to load."""
        from agents.backends import BackendError, open_backend

        try:
            backend = open_backend(self.settings)
        except BackendError as exc:
            self.call_from_thread(self.model_failed, str(exc))
            return
        self.call_from_thread(self.model_ready, backend)

    def model_ready(self, backend: Backend) -> None:
        self.backend = backend
        self.sub_title = f"{self.store.where} · {backend.name}: {backend.model}"

    def model_failed(self, reason: str) -> None:
        self.sub_title = f"{self.store.where} · no model"
        self.notify(
            f"no model: {reason}. Browsing and labelling still work.",
            severity="warning",
            timeout=15,
            markup=False,
        )

    def apply_theme(self) -> None:
        themes, problems = load_themes()
        for theme in themes:
            self.register_theme(theme)
        for problem in problems:
            self.notify(problem, severity="warning", timeout=10, markup=False)
        wanted = self.settings.theme
        if wanted in self.available_themes:
            self.theme = wanted
        else:
            self.notify(
                f"unknown theme {wanted!r}; using {FALLBACK_THEME}",
                severity="error",
                timeout=10,
                markup=False,
            )
            self.theme = FALLBACK_THEME

    def apply_keymap(self) -> None:
        """The `keys` setting: binding id -> keys. An id no binding has is named in a
        warning (a typo would otherwise go unnoticed) and the rest still apply."""
        known = {b.id for b in self.BINDINGS if isinstance(b, Binding) and b.id}
        unknown = sorted(set(self.settings.keys) - known)
        if unknown:
            self.notify(
                f"unknown key binding id {', '.join(unknown)} in the keys setting "
                f"(known: {', '.join(sorted(known))})",
                severity="warning",
                timeout=10,
                markup=False,
            )
        self.set_keymap({k: v for k, v in self.settings.keys.items() if k in known})

    def action_refresh(self) -> None:
        self.load_sessions()

    @work(thread=True, exclusive=True, exit_on_error=False, group="store")
    def load_sessions(self) -> None:
        sessions = self.store.list_sessions(limit=1000)
        self.call_from_thread(self.show_sessions, sessions)

    def show_sessions(self, sessions: list[Session]) -> None:
        tree = self.query_one("#trace-tree", Tree)
        tree.clear()
        if not sessions:
            tree.root.add_leaf(Text("no sessions yet", style="dim"), data=None)
        for session in sessions:
            task = session.task.strip()
            title = session.title or (task.splitlines()[0][:60] if task else "(untitled)")
            label = Text(f"#{session.id} ", style="bold")
            label.append(title)
            label.append(f"  {session.status.value}", style="dim")
            tree.root.add(label, data=SessionEntry(session), allow_expand=True)
        tree.cursor_line = 0

    @on(Tree.NodeExpanded)
    def expand_session(self, event: Tree.NodeExpanded[SessionEntry | BlockEntry | None]) -> None:
        entry = event.node.data
        if isinstance(entry, SessionEntry) and not event.node.children:
            self.load_blocks(event.node, entry.session.id)

    @work(thread=True, exit_on_error=False, group="store")
    def load_blocks(
        self, tree_node: TreeNode[SessionEntry | BlockEntry | None], session_id: int
    ) -> None:
        nodes = self.store.tree(session_id)
        labels = self.store.session_labels(session_id)
        self.call_from_thread(self.show_blocks, tree_node, nodes, labels)

    def show_blocks(
        self,
        tree_node: TreeNode[SessionEntry | BlockEntry | None],
        nodes: list[Node],
        labels: dict[int, Label],
    ) -> None:
        if not nodes:
            tree_node.add_leaf(Text("no blocks", style="dim"), data=None)
        for tick, blocks in groupby(
            sorted(nodes, key=lambda n: (n.tick, n.id)), key=lambda n: n.tick
        ):
            tick_node = tree_node.add(f"tick {tick}", data=None, expand=True)
            for node in blocks:
                tick_node.add_leaf(
                    block_label(node, labels.get(node.id)),
                    data=BlockEntry(node, labels.get(node.id)),
                )

    @on(Tree.NodeHighlighted)
    def show_block(self, event: Tree.NodeHighlighted[SessionEntry | BlockEntry | None]) -> None:
        entry = event.node.data
        self.query_one(BlockView).show(entry if isinstance(entry, BlockEntry) else None)

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            # Database errors carry the SQL and its parameters: the first line says enough.
            cause = getattr(event.worker.error, "orig", None) or event.worker.error
            reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
            self.notify(
                f"{event.worker.name} failed: {reason}", severity="error", timeout=10, markup=False
            )
