"""The panes beside the trace tree (the block view, its candidates, the inspector): what
the tree's selection shows in them."""

from __future__ import annotations

from rich.text import Text
from textual.dom import DOMNode

from app.widgets.block_view import BlockView, Candidates
from app.widgets.inspector import Inspector
from app.widgets.trace_tree import BlockEntry, Entry, SessionEntry, TickEntry, TraceTree


class DetailPanes:
    def __init__(self, screen: DOMNode) -> None:
        self.screen = screen

    def show(self, entry: Entry) -> None:
        """A block with its label, candidates and tick; a tick; a session; or nothing."""
        tree = self.screen.query_one(TraceTree)
        view, candidates = self.screen.query_one(BlockView), self.screen.query_one(Candidates)
        inspector = self.screen.query_one(Inspector)
        trace = tree.trace_of(entry)
        if isinstance(entry, BlockEntry) and trace is not None:
            node = trace.nodes.get(entry.node.id, entry.node)
            view.show(node, trace.labels.get(node.id))
            candidates.show(node, trace.candidates(node))
            inspector.inspect(trace, node.tick)
        elif isinstance(entry, TickEntry) and trace is not None:
            view.update(Text(f"tick {entry.tick}: select one of its blocks", style="dim"))
            candidates.show(None, [])
            inspector.inspect(trace, entry.tick)
        elif isinstance(entry, SessionEntry):
            view.show_session(entry.session)
            candidates.show(None, [])
            inspector.clear()
        else:
            view.show(None)

    def clear(self) -> None:
        """The block view, its candidates and the inspector back to empty."""
        self.screen.query_one(BlockView).show(None)
        self.screen.query_one(Candidates).show(None, [])
        self.screen.query_one(Inspector).clear()
