"""Labels from the task's own checks, for the rounds of `agent-console improve`.

A session the checks passed (its last outcome: every task check passed) gets a good path
label on that outcome: every block the model wrote on the way is an SFT example. A session
they did not pass gets a bad label on each action it ran (executed or raised): KTO's undesirable side, and DPO's wherever an action has a sibling labelled good.
In either, an action candidate tried against the checks on a copy of the work dir
(`RunOptions.choose_by_checks`, `blocks.CHECKS_META`) and not chosen gets the label its
trial earned: good if it passed (another SFT example), bad if not (the rejected side of a
pair with the one that passed).

Every such label is stored with `source="checks"` (`storage.CHECKS_SOURCE`). None is written
where the operator labelled the block, and an operator's label given later outranks it
(`TraceStore.label_of`, `training.rules`): on the same branch the operator's word wins.
Labelling a session twice writes nothing the second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents.blocks import CHECKS_META, OUTCOME
from agents.runtime.session_task import session_solved
from storage import CHECKS_SOURCE, LabelScope, LabelValue, NodeStatus

if TYPE_CHECKING:
    from storage import Label, Node
    from storage.views import Review

#: the actions a failing session ran: the ones its checks judge
RAN = frozenset({NodeStatus.EXECUTED, NodeStatus.FAILED})


@dataclass(frozen=True)
class AutoLabels:
    """What labelling one session from its checks did."""

    session_id: int
    solved: bool
    #: labels written now
    good: int = 0
    bad: int = 0
    #: blocks left alone because the operator labelled them
    kept: int = 0


def label_from_checks(store: Review, session_id: int) -> AutoLabels:
    """Label one finished session from its task checks; see the module's docstring."""
    tree = store.tree(session_id)
    solved = session_solved(store, session_id)
    existing = {lab.node_id: lab for lab in _all_labels(store, tree)}
    targets: list[tuple[Node, LabelValue, LabelScope]] = []
    if solved:
        outcome = [n for n in tree if n.kind == OUTCOME][-1]
        targets.append((outcome, LabelValue.GOOD, LabelScope.PATH))
    else:
        # Only what ran: an alternate never did, and a tried action that raised stays on
        # the path (the error and a debug block follow it).
        for node in tree:
            if node.kind == "action" and node.status in RAN:
                targets.append((node, LabelValue.BAD, LabelScope.BLOCK))
    for node in tree:
        if node.kind == "action" and node.status is NodeStatus.ALTERNATE:
            tried = node.meta.get(CHECKS_META)
            if tried is not None:
                value = LabelValue.GOOD if tried else LabelValue.BAD
                targets.append((node, value, LabelScope.BLOCK))
    good = bad = kept = 0
    for node, value, scope in targets:
        label = existing.get(node.id)
        if label is not None and label.source is None:
            kept += 1  # the operator's: never overridden
            continue
        if label is not None and label.source == CHECKS_SOURCE and label.value is value:
            continue  # labelled before (a resumed round)
        store.add_label(node.id, value, scope=scope, source=CHECKS_SOURCE)
        if value is LabelValue.GOOD:
            good += 1
        else:
            bad += 1
    return AutoLabels(session_id, solved, good, bad, kept)


def _all_labels(store: Review, tree: list[Node]) -> list[Label]:
    """Each node's effective label (the operator's where there is one)."""
    return list(store.session_labels(tree[0].session_id).values()) if tree else []
