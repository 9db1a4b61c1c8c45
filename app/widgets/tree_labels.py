"""The labels the operator gives on the main screen (`g`, `b`) and takes back (`u`),
through the shared `Labeller` (`app.labelling`), written and read back in thread workers;
and the labels given elsewhere (the labelling and similar-branches screens), read back
into the tree."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from textual import on, work
from textual.widget import Widget
from textual.worker import Worker

from app.labelling import Given, Labeller
from app.shared import report_failure
from app.widgets.trace_tree import Entry, TraceTree

if TYPE_CHECKING:
    from storage import Label, LabelValue, Node
    from storage.views import Review


class LabelsOwner(Protocol):
    """What the labels need of the screen whose tree shows them."""

    @property
    def store(self) -> Review: ...

    def show_selected(self, entry: Entry) -> None: ...

    def footer_for_selection(self, *, force: bool = False) -> None: ...


class TreeLabels(Widget):
    DEFAULT_CSS = "TreeLabels { display: none; }"

    def __init__(self, owner: LabelsOwner) -> None:
        super().__init__(id="tree-labels")
        self.owner = owner
        self._labeller: Labeller[None] | None = None

    @property
    def labeller(self) -> Labeller[None]:
        """The labels given here (`u` undoes them), once the store is open."""
        if self._labeller is None:
            self._labeller = Labeller(self.owner.store)
        return self._labeller

    def give(self, node: Node | None, value: LabelValue) -> None:
        if node is not None:
            self.write_label(node, value)

    @work(thread=True, exit_on_error=False, group="labels")
    def write_label(self, node: Node, value: LabelValue) -> None:
        given = self.labeller.write(node.id, value, None)
        read = {node.session_id: self.owner.store.session_labels(node.session_id)}
        self.app.call_from_thread(self.show_labels, read, given)

    def undo(self) -> None:
        given = self.labeller.last
        if given is not None:
            self.labeller.forget(given)
            self.retract(given)

    @work(thread=True, exit_on_error=False, group="labels")
    def retract(self, given: Given[None]) -> None:
        warning = self.labeller.take_back(given)
        if warning is not None:
            self.app.call_from_thread(self.notify, warning, severity="warning", markup=False)
        session_id = self.owner.store.get_node(given.label.node_id).session_id
        read = {session_id: self.owner.store.session_labels(session_id)}
        self.app.call_from_thread(self.show_labels, read)

    def changed_elsewhere(self, _: object = None) -> None:
        """Labels were given elsewhere: read back the open sessions'."""
        self.reload_labels(list(self.screen.query_one(TraceTree).traces))

    @work(thread=True, exit_on_error=False, group="labels")
    def reload_labels(self, session_ids: list[int]) -> None:
        store = self.owner.store
        read = {session_id: store.session_labels(session_id) for session_id in session_ids}
        self.app.call_from_thread(self.show_labels, read)

    def show_labels(
        self, read: dict[int, dict[int, Label]], given: Given[None] | None = None
    ) -> None:
        """Labels read back, into the tree and the block view (`given`: the label given
        here that they follow, for `u`)."""
        if given is not None:
            self.labeller.record(given)
        tree = self.screen.query_one(TraceTree)
        for session_id, labels in read.items():
            tree.set_labels(session_id, labels)
        if tree.cursor_node is not None:
            self.owner.show_selected(tree.cursor_node.data)
        self.owner.footer_for_selection(force=True)

    @on(Worker.StateChanged)
    def report_failure(self, event: Worker.StateChanged) -> None:
        # Worker.StateChanged does not bubble: the app's reporter sees only its own workers.
        report_failure(self, event)
