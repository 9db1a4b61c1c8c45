"""The labels an operator gives on a screen, and undoing them: one labeller for the main
screen and the labelling screen, with one policy for what goes wrong.

A label is written and taken back in the store (from a screen's thread worker); the stack
of labels given, which `u` undoes newest first, is kept on the screen's thread. A label
taken back elsewhere meanwhile (another console, the similar-branches screen) is undone
either way: the undo says so in a warning and moves on, never an error."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from storage import Label, LabelScope, LabelValue, StoreError

if TYPE_CHECKING:
    from storage.views import Labels

#: what a screen keeps with a label to undo it (the labelling screen: its queue item)
Context = TypeVar("Context")


@dataclass(frozen=True, slots=True)
class Given(Generic[Context]):
    """A label given on this screen, and what the screen needs to undo it."""

    label: Label
    context: Context


class Labeller(Generic[Context]):
    def __init__(self, store: Labels) -> None:
        self.store = store
        #: the labels given here, oldest first (`u` takes back the last)
        self.given: list[Given[Context]] = []

    # -- the store (from a thread worker) -----------------------------------------------

    def write(
        self,
        node_id: int,
        value: LabelValue,
        context: Context,
        *,
        scope: LabelScope = LabelScope.BLOCK,
        note: str | None = None,
    ) -> Given[Context]:
        """The label stored; `record` it on the screen's thread."""
        return Given(self.store.add_label(node_id, value, scope=scope, note=note), context)

    def take_back(self, given: Given[Context]) -> str | None:
        """The label retracted; a warning for the operator when it was taken back (or
        removed) elsewhere meanwhile: it is undone either way."""
        try:
            self.store.retract_label(given.label.id)
        except StoreError as exc:
            return f"{exc}: nothing more to undo for it"
        return None

    # -- the stack (on the screen's thread) ---------------------------------------------

    def record(self, given: Given[Context]) -> None:
        self.given.append(given)

    @property
    def last(self) -> Given[Context] | None:
        return self.given[-1] if self.given else None

    def forget(self, given: Given[Context]) -> None:
        """`given` is undone: off the stack (when it is still the last)."""
        if self.given and self.given[-1] == given:
            self.given.pop()
