"""The trace tree: sessions, their ticks, the blocks of each tick, and the candidates
that lost under the block that won.

Everything is lazy, because Textual's Tree rebuilds every visible line on any change of
shape (ENVIRONMENT.md): a session's blocks are read when it is expanded, a tick's tree
nodes are made when the tick is expanded, and live blocks are appended in batches.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.widgets import Tree
from textual.widgets.tree import TreeNode
from textual.worker import Worker

from agents.safe_text import escape_controls
from app.actions import TREE_ACTIONS, bindings
from app.shared import report_failure
from storage import (
    CheckCounts,
    Checked,
    Label,
    LabelScope,
    LabelValue,
    Node,
    NodeStatus,
    Session,
    SessionStatus,
    count_checks,
)

if TYPE_CHECKING:
    from storage.views import Review

STATUS_MARKS = {
    NodeStatus.APPROVED: "✔",
    NodeStatus.EDITED: "✎",
    NodeStatus.REJECTED: "✘",
    NodeStatus.FAILED: "!",
    NodeStatus.ALTERNATE: "⋯",
}
#: Candidates that lost: shown under the sibling that took their place.
LOSING = (NodeStatus.ALTERNATE, NodeStatus.EDITED)
PREVIEW = 60
#: Ended sessions whose line says why (the reason the runtime stored with the status).
EXPLAINED = frozenset({SessionStatus.FAILED, SessionStatus.TRUNCATED, SessionStatus.ABORTED})
#: A session with more ticks than this shows them in groups of TICK_GROUP, each filled
#: when opened: a change of shape redraws every visible line, so they must stay few.
GROUP_OVER = 200
TICK_GROUP = 100


def empty_lines() -> list[Text]:
    """What an empty store shows: how to start the first session (the default keys)."""
    return [
        Text("no sessions yet", style="dim"),
        Text.assemble(("i", "bold"), ("  type a task for the agent", "dim")),
        Text.assemble(("ctrl+p", "bold"), ("  session: New … a shipped task", "dim")),
    ]


@dataclass(frozen=True)
class SessionEntry:
    session: Session


@dataclass(frozen=True)
class TickEntry:
    session_id: int
    tick: int


@dataclass(frozen=True)
class TickGroupEntry:
    session_id: int
    group: int


@dataclass(frozen=True)
class BlockEntry:
    node: Node


Entry = SessionEntry | TickGroupEntry | TickEntry | BlockEntry | None
TraceNode = TreeNode[Entry]


@dataclass
class SessionTrace:
    """One loaded session: its blocks by tick, labels and evaluation marks."""

    session: Session
    nodes: dict[int, Node] = field(default_factory=dict)
    ticks: dict[int, list[int]] = field(default_factory=dict)
    labels: dict[int, Label] = field(default_factory=dict)
    #: node id -> its evaluation callbacks by verdict (blocks without any are absent)
    evaluations: dict[int, CheckCounts] = field(default_factory=dict)
    tree_ticks: dict[int, TraceNode] = field(default_factory=dict)
    tree_groups: dict[int, TraceNode] = field(default_factory=dict)
    grouped: bool = False
    #: tick groups whose tick lines have been made
    filled_groups: set[int] = field(default_factory=set)
    tree_blocks: dict[int, TraceNode] = field(default_factory=dict)
    #: ticks whose block nodes have been made (the others are filled on expand)
    filled: set[int] = field(default_factory=set)

    @classmethod
    def read(cls, store: Review, session: Session) -> SessionTrace:
        """The session's blocks, labels and evaluation marks, read from the store (from a
        thread worker)."""
        trace = cls(
            session,
            labels=store.session_labels(session.id),
            evaluations=store.session_evaluation_marks(session.id),
        )
        for node in store.tree(session.id):
            trace.add(node)
        return trace

    def add(self, node: Node) -> bool:
        """Store a block; True when it is new (not a status change of a known one)."""
        new = node.id not in self.nodes
        self.nodes[node.id] = node
        if new:
            self.ticks.setdefault(node.tick, []).append(node.id)
        return new

    def tick_blocks(self, tick: int) -> list[Node]:
        return [self.nodes[i] for i in self.ticks.get(tick, [])]

    def tick_checks(self, tick: int) -> CheckCounts:
        """The evaluation callbacks on the tick's blocks, counted as the inspector does."""
        return sum(
            (self.evaluations[i] for i in self.ticks.get(tick, []) if i in self.evaluations),
            CheckCounts(),
        )

    def candidates(self, node: Node) -> list[Node]:
        """The node and its siblings of the same kind: the candidates it was chosen from."""
        return [
            n
            for n in self.tick_blocks(node.tick)
            if n.parent_id == node.parent_id and n.kind == node.kind
        ]


def session_label(session: Session) -> Text:
    task = session.task.strip()
    title = session.title or (task.splitlines()[0][:PREVIEW] if task else "(untitled)")
    label = Text(f"#{session.id} ", style="bold")
    label.append(title)
    status = session.status
    style = "bold" if status in (SessionStatus.RUNNING, SessionStatus.WAITING) else "dim"
    label.append(f"  {status.value}", style=style)
    reason = session.status_reason.strip()
    if reason and status in EXPLAINED:
        first = reason.splitlines()[0]
        cut = first[:PREVIEW] + ("…" if len(first) > PREVIEW else "")
        label.append(f": {cut}", style=style)
    if session.adapter:
        label.append(f"  adapter {session.adapter}", style="dim italic")
    return label


def block_label(node: Node, label: Label | None, checks: CheckCounts | None, error: str) -> Text:
    text = Text()
    if label is not None:
        good = label.value is LabelValue.GOOD
        sign = ("+" if good else "-") + ("*" if label.scope is LabelScope.PATH else "")
        if label.automatic:
            sign = "⚙" + sign  # the task's checks gave it, not the operator
        text.append(f"{sign} ", style="bold green" if good else f"bold {error}")
    mark = STATUS_MARKS.get(node.status)
    if mark:
        text.append(f"{mark} ", style=error if node.status is NodeStatus.FAILED else "dim")
    losing = node.status in LOSING
    text.append(node.kind, style="dim" if losing else "bold" if node.kind == "action" else "")
    failed = checks is not None and not checks.all_passed
    if checks is not None and checks.total:
        text.append(" ✗" if failed else " ✓", style=error if failed else "green")
    if node.score is not None:
        text.append(f" {node.score:+.1f}", style="dim")
    first = node.text.strip().splitlines()[0][:PREVIEW] if node.text.strip() else ""
    if first:
        text.append(f"  {escape_controls(first)}", style=f"dim {error}" if failed else "dim")
    return text


class TraceTree(Tree[Entry]):
    """Sessions > ticks > blocks, with alternates under the block they lost to."""

    BINDINGS = bindings(TREE_ACTIONS)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("sessions", id=id)
        self.show_root = False
        self.traces: dict[int, SessionTrace] = {}
        self.session_nodes: dict[int, TraceNode] = {}
        self.error_colour = "red"
        #: what the tree reads its sessions from, once the store is open (`load`)
        self.store: Review | None = None

    # -- reading the store (thread workers) ----------------------------------------------

    def load(self, store: Review) -> None:
        """The store is open: list its sessions (a session's blocks are read when it is
        first expanded)."""
        self.store = store
        self.loading = False
        self.load_sessions()

    @work(thread=True, exclusive=True, exit_on_error=False, group="sessions")
    def load_sessions(self) -> None:
        assert self.store is not None
        sessions = self.store.list_sessions(limit=1000)
        self.app.call_from_thread(self.show_sessions, sessions)

    @work(thread=True, exit_on_error=False, group="trace")
    def load_trace(self, session: Session) -> None:
        assert self.store is not None
        self.app.call_from_thread(self.show_trace, SessionTrace.read(self.store, session))

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        # Worker.StateChanged does not bubble: the app's reporter sees only its own workers.
        report_failure(self, event)

    # -- sessions ----------------------------------------------------------------------

    def show_sessions(self, sessions: Sequence[Session]) -> None:
        self.clear()
        self.traces.clear()
        self.session_nodes.clear()
        if not sessions:
            for line in empty_lines():
                self.root.add_leaf(line, data=None)
        for session in sessions:
            self.add_session(session)
        self.cursor_line = 0

    def add_session(self, session: Session, *, first: bool = False) -> TraceNode:
        """A session line; `first` puts a new one at the top (newest first)."""
        if session.id in self.session_nodes:
            self.update_session(session)
            return self.session_nodes[session.id]
        if not self.session_nodes:
            self.root.remove_children()  # the "no sessions yet" lines
        children = self.root.children
        before = children[0] if first and children else None
        node = self.root.add(
            session_label(session), data=SessionEntry(session), before=before, allow_expand=True
        )
        self.session_nodes[session.id] = node
        return node

    def update_session(self, session: Session) -> None:
        node = self.session_nodes.get(session.id)
        if node is not None:
            node.data = SessionEntry(session)
            node.set_label(session_label(session))
        if session.id in self.traces:
            self.traces[session.id].session = session

    def show_trace(self, trace: SessionTrace) -> None:
        """A session's blocks are loaded: make its tick lines (blocks wait for expansion)."""
        self.traces[trace.session.id] = trace
        node = self.session_nodes.get(trace.session.id)
        if node is None:
            return
        node.remove_children()
        trace.tree_ticks.clear()
        trace.tree_blocks.clear()
        trace.tree_groups.clear()
        trace.filled.clear()
        trace.filled_groups.clear()
        trace.grouped = len(trace.ticks) > GROUP_OVER
        if not trace.ticks:
            node.add_leaf(Text("no blocks yet", style="dim"), data=None)
        if trace.grouped:
            for group in sorted({tick // TICK_GROUP for tick in trace.ticks}):
                self._add_group(trace, group)
            last_group = max(trace.ticks) // TICK_GROUP
            self.fill_group(trace, last_group)
            trace.tree_groups[last_group].expand()
        else:
            for tick in sorted(trace.ticks):
                self._add_tick(trace, tick)
        if trace.ticks:
            last = trace.tree_ticks[max(trace.ticks)]
            self.fill_tick(trace, max(trace.ticks))
            last.expand()
        # A big trace leaves many long-lived objects: keep full collections off them.
        if len(trace.nodes) > 5000:
            gc.collect()
            gc.freeze()

    # -- ticks and blocks ----------------------------------------------------------------

    def _add_group(self, trace: SessionTrace, group: int) -> TraceNode:
        first = group * TICK_GROUP
        label = Text(f"ticks {first} to {first + TICK_GROUP - 1}", style="bold")
        node = self.session_nodes[trace.session.id].add(
            label, data=TickGroupEntry(trace.session.id, group), allow_expand=True
        )
        trace.tree_groups[group] = node
        return node

    def fill_group(self, trace: SessionTrace, group: int) -> None:
        trace.filled_groups.add(group)
        for tick in sorted(t for t in trace.ticks if t // TICK_GROUP == group):
            if tick not in trace.tree_ticks:
                self._add_tick(trace, tick)

    def _add_tick(self, trace: SessionTrace, tick: int) -> TraceNode | None:
        """The tick's line, under its session or its group; None while its group is
        closed and unfilled (the line is made when the group is opened)."""
        session_node = self.session_nodes[trace.session.id]
        if trace.grouped:
            group = tick // TICK_GROUP
            if group not in trace.tree_groups:
                self._add_group(trace, group)
            if group not in trace.filled_groups:
                return None
            parent = trace.tree_groups[group]
        else:
            if not trace.tree_ticks and session_node.children:
                session_node.remove_children()  # "no blocks yet"
            parent = session_node
        node = parent.add(
            self.tick_label(trace, tick), data=TickEntry(trace.session.id, tick), allow_expand=True
        )
        trace.tree_ticks[tick] = node
        return node

    def tick_label(self, trace: SessionTrace, tick: int) -> Text:
        blocks = trace.tick_blocks(tick)
        label = Text(f"tick {tick}", style="bold")
        main = [n for n in blocks if n.status not in LOSING]
        actions = [n for n in main if n.kind == "action"]
        for action in actions:
            label.append(f" {STATUS_MARKS.get(action.status, '·')}", style="dim")
        checks = trace.tick_checks(tick)
        if checks.total:
            style = "green" if checks.all_passed else self.error_colour
            label.append(f"  {checks.summary()}", style=style)
        labelled = [trace.labels[n.id] for n in blocks if n.id in trace.labels]
        for automatic, sign in ((False, ""), (True, "⚙")):  # the operator's, the checks'
            given = [lab for lab in labelled if lab.automatic is automatic]
            if given:
                good = sum(1 for lab in given if lab.value is LabelValue.GOOD)
                label.append(f"  {sign}+{good} -{len(given) - good}", style="dim")
        label.append(f"  {len(blocks)} blocks", style="dim")
        return label

    def fill_tick(self, trace: SessionTrace, tick: int) -> None:
        """Make the block lines of a tick (on first expansion, or again after a change
        that moves blocks around, such as an alternate picked)."""
        tick_node = trace.tree_ticks[tick]
        for block in trace.tick_blocks(tick):
            trace.tree_blocks.pop(block.id, None)
        tick_node.remove_children()
        trace.filled.add(tick)
        blocks = trace.tick_blocks(tick)
        hosts: dict[tuple[int | None, str], TraceNode] = {}
        for node in blocks:
            if node.status in LOSING:
                continue
            tree_node = tick_node.add(self.block_text(trace, node), data=BlockEntry(node))
            tree_node.allow_expand = False
            trace.tree_blocks[node.id] = tree_node
            hosts.setdefault((node.parent_id, node.kind), tree_node)
        for node in blocks:
            if node.status not in LOSING:
                continue
            host = hosts.get((node.parent_id, node.kind), tick_node)
            host.allow_expand = True
            trace.tree_blocks[node.id] = host.add_leaf(
                self.block_text(trace, node), data=BlockEntry(node)
            )

    def block_text(self, trace: SessionTrace, node: Node) -> Text:
        return block_label(
            node, trace.labels.get(node.id), trace.evaluations.get(node.id), self.error_colour
        )

    def refresh_block(self, trace: SessionTrace, node_id: int) -> None:
        node = trace.nodes.get(node_id)
        tree_node = trace.tree_blocks.get(node_id)
        if node is not None and tree_node is not None:
            tree_node.data = BlockEntry(node)
            tree_node.set_label(self.block_text(trace, node))
        if node is not None and node.tick in trace.tree_ticks:
            trace.tree_ticks[node.tick].set_label(self.tick_label(trace, node.tick))

    # -- live ------------------------------------------------------------------------------

    def add_live_nodes(self, session_id: int, nodes: Sequence[Node]) -> None:
        """Blocks made (or changed) by a running agent, in one batch. A session that was
        never expanded just keeps its line; its blocks are read when it is opened."""
        trace = self.traces.get(session_id)
        if trace is None:
            return
        regroup: set[int] = set()
        appended: dict[int, list[Node]] = {}
        for node in nodes:
            old = trace.nodes.get(node.id)
            new = trace.add(node)
            if node.tick not in trace.tree_ticks:
                made = self._add_tick(trace, node.tick)
                if made is None and node.tick == max(trace.ticks):
                    # the agent's new tick starts a group: that group opens too
                    group = node.tick // TICK_GROUP
                    self.fill_group(trace, group)
                    trace.tree_groups[group].expand()
                    made = trace.tree_ticks[node.tick]
                if made is None:
                    continue
                if node.tick == max(trace.ticks):
                    # the agent moved on: its new tick opens, so its blocks show as they come
                    trace.filled.add(node.tick)
                    made.expand()
            if node.tick not in trace.filled:
                continue
            if new and node.status not in LOSING:
                appended.setdefault(node.tick, []).append(node)
            elif new or (old is not None and (old.status in LOSING) != (node.status in LOSING)):
                regroup.add(node.tick)
            else:
                self.refresh_block(trace, node.id)
        for tick, added in appended.items():
            if tick in regroup:
                continue
            tick_node = trace.tree_ticks[tick]
            for node in added:
                tree_node = tick_node.add(self.block_text(trace, node), data=BlockEntry(node))
                tree_node.allow_expand = False
                trace.tree_blocks[node.id] = tree_node
        cursor = self.cursor_node
        for tick in regroup:
            self.fill_tick(trace, tick)
        for tick in {n.tick for n in nodes}:
            if tick in trace.tree_ticks:
                trace.tree_ticks[tick].set_label(self.tick_label(trace, tick))
        if regroup and cursor is not None and isinstance(cursor.data, BlockEntry):
            moved = trace.tree_blocks.get(cursor.data.node.id)
            if moved is not None and moved is not cursor:
                if moved.parent is not None and not moved.parent.is_expanded:
                    moved.parent.expand()  # the cursor was on a loser its host folded away
                # A node just made has line -1 until the lines are rebuilt (reading
                # last_line rebuilds them); moving there first would land on line 0.
                if self.last_line >= 0:
                    self.move_cursor(moved, animate=False)

    def add_arrivals(
        self, arrived: Sequence[Node], evaluated: Sequence[tuple[int, int]]
    ) -> tuple[set[int], set[tuple[int, int]]]:
        """What a live session reported since the last update, into the tree: its blocks
        (a batch per session) and the blocks newly evaluated. Returns the sessions that
        got blocks and the (session, tick) pairs touched."""
        nodes: dict[int, list[Node]] = {}
        touched: set[tuple[int, int]] = set()
        for node in arrived:
            nodes.setdefault(node.session_id, []).append(node)
            touched.add((node.session_id, node.tick))
        for session_id, batch in nodes.items():
            self.add_live_nodes(session_id, batch)
        for session_id, node_id in evaluated:
            trace = self.traces.get(session_id)
            marked = trace.nodes.get(node_id) if trace else None
            if marked is not None:
                touched.add((session_id, marked.tick))
        return set(nodes), touched

    # -- jumping to a block ----------------------------------------------------------------

    def reveal(self, session_id: int, node_id: int) -> None:
        """Select block `node_id` (so the block view and inspector show it), opening its
        session, tick group and tick; the session is read first if needed."""
        trace = self.traces.get(session_id)
        # A trace read before the block was written (a batch or another console is still
        # adding to the session) is read again.
        if trace is not None and node_id in trace.nodes and session_id in self.session_nodes:
            self._select_or_say(session_id, node_id)
        else:
            self.load_for_reveal(session_id, node_id, session_id not in self.session_nodes)

    @work(thread=True, exclusive=True, exit_on_error=False, group="reveal",
          name="opening the session")  # fmt: skip
    def load_for_reveal(self, session_id: int, node_id: int, listed: bool) -> None:
        assert self.store is not None
        trace = SessionTrace.read(self.store, self.store.get_session(session_id))
        self.app.call_from_thread(self._show_for_reveal, trace, node_id, listed)

    def _show_for_reveal(self, trace: SessionTrace, node_id: int, listed: bool) -> None:
        self.show_revealed(trace, node_id, listed)
        self._select_or_say(trace.session.id, node_id)

    def _select_or_say(self, session_id: int, node_id: int) -> None:
        if not self.select_block(session_id, node_id):
            self.notify(f"block #{node_id} is not in the store", severity="warning")

    def show_revealed(self, trace: SessionTrace, node_id: int, listed: bool) -> None:
        """A session read to reveal block `node_id`, into the tree: its line added
        (`listed`: it was older than the sessions listed) or brought up to date, and its
        blocks shown unless the tree holds that block already."""
        if listed:
            self.add_session(trace.session)
        else:
            self.update_session(trace.session)  # its status may have changed since
        known = self.traces.get(trace.session.id)
        if known is None or node_id not in known.nodes:
            self.show_trace(trace)

    def select_block(self, session_id: int, node_id: int) -> bool:
        """The cursor on block `node_id`, its session, tick group and tick opened; False
        when the tree does not hold it."""
        trace = self.traces.get(session_id)
        node = trace.nodes.get(node_id) if trace is not None else None
        if trace is None or node is None:
            return False
        self.session_nodes[session_id].expand()
        if trace.grouped:
            group = node.tick // TICK_GROUP
            if group not in trace.filled_groups:
                self.fill_group(trace, group)
            trace.tree_groups[group].expand()
        if node.tick not in trace.filled:
            self.fill_tick(trace, node.tick)
        trace.tree_ticks[node.tick].expand()
        target = trace.tree_blocks[node_id]
        if target.parent is not None:
            target.parent.expand()  # a candidate that lost sits under the one that won
        # New lines have no line number until the tree's lines are rebuilt (reading
        # last_line rebuilds them): moving before that would land on line 0.
        if self.last_line >= 0:
            self.move_cursor(target, animate=False)
        self.focus()
        return True

    def set_labels(self, session_id: int, labels: dict[int, Label]) -> None:
        """The session's labels changed (labelled here or on the labelling screen)."""
        trace = self.traces.get(session_id)
        if trace is None:
            return
        changed = set(trace.labels) ^ set(labels) | {
            i for i in labels if trace.labels.get(i) != labels[i]
        }
        trace.labels = labels
        for node_id in changed:
            self.refresh_block(trace, node_id)

    def set_evaluation(self, session_id: int, node_id: int, result: Checked) -> None:
        """A live session recorded an evaluation on a block: one more check counted (a
        logit question or an observation view counts nothing)."""
        trace = self.traces.get(session_id)
        if trace is None:
            return
        counts = trace.evaluations.get(node_id, CheckCounts()) + count_checks([result])
        if counts.total:
            trace.evaluations[node_id] = counts
        self.refresh_block(trace, node_id)

    def selected_block(self) -> Node | None:
        """The block under the cursor, if the cursor is on a block."""
        node = self.cursor_node
        if node is not None and isinstance(node.data, BlockEntry):
            return node.data.node
        return None

    def selected_session(self) -> Session | None:
        """The session the cursor is in (on its line, a tick or a block of it)."""
        node = self.cursor_node
        if node is None:
            return None
        trace = self.trace_of(node.data)
        if trace is not None:
            return trace.session
        return node.data.session if isinstance(node.data, SessionEntry) else None

    def selected_label(self) -> Label | None:
        """The label in effect on the block under the cursor, if it has one."""
        node = self.selected_block()
        trace = self.traces.get(node.session_id) if node is not None else None
        return trace.labels.get(node.id) if node is not None and trace is not None else None

    def find_block(self, node_id: int) -> TraceNode | None:
        for trace in self.traces.values():
            if node_id in trace.tree_blocks:
                return trace.tree_blocks[node_id]
        return None

    def trace_of(self, entry: Entry) -> SessionTrace | None:
        if isinstance(entry, SessionEntry):
            return self.traces.get(entry.session.id)
        if isinstance(entry, TickEntry | TickGroupEntry):
            return self.traces.get(entry.session_id)
        if isinstance(entry, BlockEntry):
            return self.traces.get(entry.node.session_id)
        return None

    def _on_tree_node_expanded(self, event: Tree.NodeExpanded[Entry]) -> None:
        entry = event.node.data
        if isinstance(entry, SessionEntry):
            if entry.session.id not in self.traces and self.store is not None:
                self.load_trace(entry.session)
        elif isinstance(entry, TickEntry):
            trace = self.traces.get(entry.session_id)
            if trace is not None and entry.tick not in trace.filled:
                self.fill_tick(trace, entry.tick)
        elif isinstance(entry, TickGroupEntry):
            trace = self.traces.get(entry.session_id)
            if trace is not None and entry.group not in trace.filled_groups:
                self.fill_group(trace, entry.group)

    # -- keys ------------------------------------------------------------------------------

    def action_first(self) -> None:
        self.move_cursor_to_line(0, animate=False)

    def action_last(self) -> None:
        # No animation: Tree's own end key scrolls smoothly for ~230 ms at any size.
        self.move_cursor_to_line(max(self.last_line, 0), animate=False)
