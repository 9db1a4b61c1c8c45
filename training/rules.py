"""Which blocks of the trace tree are training data: docs/architecture.md's "Training data
from the tree", applied to one session's tree and what the operator said about it.

Nothing here renders a prompt; the dataset builders do that later from the ids these
rules pick. That keeps the rules cheap enough to count after every label, and keeps them
in one place, so the label screen's counters and the trainer's datasets cannot disagree.

Whose word counts: labels, and the operator's own verdicts. A policy's verdict says
nothing about a block (`auto` approves everything, `deny` rejects everything), so it
makes no example and no pair. A block's status stands in for a verdict only when no
policy gave it (hand-built or imported trees carry statuses without decisions).

Two readings of the design worth knowing. A path label is coarse: a block already judged
wrong (the operator rejected or rewrote it, or it raised) is an example only by its own
good label, never by a path label over it or an approval given before it ran. And "lies
under a bad label" means any descendant of a bad-labelled block, except where that block
was already judged wrong: in the runtime's chain a rejected or failed action stays on the
path, followed by the operator's feedback or the error, and the blocks after it are the
agent's recovery. A bad label there (the label queue suggests one) marks the mistake; it
does not throw away the rest of the session.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, NamedTuple, Protocol

from storage import (
    Actor,
    Author,
    Decision,
    EvaluationKind,
    EvaluationResult,
    Label,
    LabelScope,
    LabelValue,
    Node,
    NodeStatus,
    Verdict,
)

if TYPE_CHECKING:
    from storage.views import Evidence


class PairRule(StrEnum):
    """Why one sibling is preferred over another."""

    LABELS = "labels"  # good over bad labels
    APPROVAL = "approval"  # approved over rejected
    EDIT = "edit"  # the operator's edit over the model's original
    PICK = "pick"  # a picked alternate over the one it replaced


class Pair(NamedTuple):
    chosen_id: int
    rejected_id: int
    rule: PairRule


class Counts(NamedTuple):
    sft_examples: int
    dpo_pairs: int


class TreeNode(Protocol):
    """What the rules read of a node: a full `Node` or a `NodeOutline` both do."""

    @property
    def id(self) -> int: ...
    @property
    def parent_id(self) -> int | None: ...
    @property
    def kind(self) -> str: ...
    @property
    def author(self) -> Author: ...
    @property
    def status(self) -> NodeStatus: ...
    @property
    def edited_from_id(self) -> int | None: ...
    @property
    def created_at(self) -> float: ...
    @property
    def updated_at(self) -> float: ...


class Suggestion(NamedTuple):
    """The label the evidence points to, and the evidence in words."""

    value: LabelValue
    reason: str


#: Statuses that are already a verdict on the block: the operator rewrote it, or it
#: raised. A path label says the path as a whole was good; it does not overrule them.
_JUDGED_STATUSES = frozenset({NodeStatus.EDITED, NodeStatus.FAILED})


class SessionEvidence:
    """One session's tree with its effective labels and decisions, indexed once, so both
    rule sets run in time linear in the tree however many labels it carries."""

    def __init__(
        self,
        nodes: Iterable[TreeNode],
        labels: Mapping[int, Label],
        decisions: Iterable[Decision],
    ) -> None:
        self.nodes: dict[int, TreeNode] = {n.id: n for n in nodes}
        #: each labelled node's effective label (a retracted one is no label)
        self.labels: dict[int, Label] = {
            node_id: label
            for node_id, label in labels.items()
            if label.retracted_at is None and node_id in self.nodes
        }
        self.children: dict[int, list[int]] = defaultdict(list)
        for node in self.nodes.values():
            if node.parent_id is not None:
                self.children[node.parent_id].append(node.id)
        self._index_verdicts(decisions)
        self._index_labels()

    # -- indexing -------------------------------------------------------------------------

    def _index_verdicts(self, decisions: Iterable[Decision]) -> None:
        #: node -> when the operator approved it (or took it instead of another)
        self.approved: dict[int, float] = {}
        #: node -> when the operator rejected it
        self.rejected: dict[int, float] = {}
        #: (picked, replaced, when) for every alternate the operator picked
        self.picks: list[tuple[int, int, float]] = []
        by_policy: set[int] = set()
        for decision in sorted(decisions, key=lambda dec: dec.id):
            node_id, result, when = decision.node_id, decision.result_node_id, decision.created_at
            if decision.actor is not Actor.OPERATOR:
                by_policy.add(node_id)
            elif decision.verdict is Verdict.APPROVE:
                self.approved.setdefault(node_id, when)
            elif decision.verdict is Verdict.REJECT:
                self.rejected.setdefault(node_id, when)
            elif decision.verdict is Verdict.EDIT and result is not None:
                self.approved.setdefault(result, when)
            elif decision.verdict is Verdict.PICK_ALTERNATE and result is not None:
                self.approved.setdefault(result, when)
                self.picks.append((result, node_id, when))
        for node in self.nodes.values():
            if node.id in by_policy:
                continue
            if node.status is NodeStatus.APPROVED:
                self.approved.setdefault(node.id, node.updated_at)
            elif node.status is NodeStatus.REJECTED:
                self.rejected.setdefault(node.id, node.updated_at)

    def _index_labels(self) -> None:
        #: node -> when a good (bad) path label on it or below it first covered it
        self.good_path: dict[int, float] = {}
        self.bad_path: dict[int, float] = {}
        # The operator's path labels first, then the automatic ones (`source`), each kind
        # oldest first. An automatic one passes over every block the operator's labels
        # cover, so on the same branch the operator's word is the one the rules read.
        ordered = sorted(self.labels.values(), key=lambda lab: (lab.created_at, lab.id))
        operator = [lab for lab in ordered if lab.source is None]
        self._mark_paths(operator, covered=set())
        covered = {lab.node_id for lab in operator} | set(self.good_path) | set(self.bad_path)
        self._mark_paths([lab for lab in ordered if lab.source is not None], covered)
        #: nodes under (descendants of) a node labelled bad, whatever the label's scope,
        #: unless that node was already judged wrong when the agent went on: the blocks
        #: after a rejected, rewritten or failed action were written knowing it (the
        #: operator's feedback, the edit, the error are on the path), so the label there
        #: marks the mistake, not the recovery.
        #: Under an automatic bad label, a block the operator labelled keeps their word.
        self.under_bad = self._under_bad(operator=True) | (
            self._under_bad(operator=False) - {lab.node_id for lab in operator}
        )

    def _under_bad(self, *, operator: bool) -> set[int]:
        found: set[int] = set()
        for node_id, label in self.labels.items():
            if (label.source is None) is not operator:
                continue
            if label.value is not LabelValue.BAD or self.judged(self.nodes[node_id]):
                continue
            stack = list(self.children.get(node_id, ()))
            while stack:
                child = stack.pop()
                if child not in found:
                    found.add(child)
                    stack.extend(self.children.get(child, ()))
        return found

    def _mark_paths(self, labels: Iterable[Label], covered: set[int]) -> None:
        for label in labels:
            if label.scope is not LabelScope.PATH:
                continue
            marks = self.good_path if label.value is LabelValue.GOOD else self.bad_path
            node_id: int | None = label.node_id
            # Oldest first, so a node already marked has its ancestors marked with a time
            # no later than this one: stop there.
            while node_id is not None and node_id not in marks:
                if node_id not in covered:
                    marks[node_id] = label.created_at
                node_id = self.nodes[node_id].parent_id if node_id in self.nodes else None

    # -- what the evidence says about one block --------------------------------------------

    def tainted(self, node_id: int) -> bool:
        """Covered by a bad label (its own, or a bad path label on it or below it), or
        under a node labelled bad: never training data, never the preferred side."""
        return self.bad_label_at(node_id) is not None or node_id in self.under_bad

    def judged(self, node: TreeNode) -> bool:
        """The operator or the sandbox already said this block was wrong."""
        return node.id in self.rejected or node.status in _JUDGED_STATUSES

    def good_label_at(self, node_id: int) -> float | None:
        """When a good label first covered the block: its own, or a good path label on
        it or below it (unless the block was already judged wrong), else None."""
        times = []
        own = self.labels.get(node_id)
        if own is not None and own.value is LabelValue.GOOD:
            times.append(own.created_at)
        node = self.nodes.get(node_id)
        if node_id in self.good_path and node is not None and not self.judged(node):
            times.append(self.good_path[node_id])
        return min(times, default=None)

    def bad_label_at(self, node_id: int) -> float | None:
        times = []
        own = self.labels.get(node_id)
        if own is not None and own.value is LabelValue.BAD:
            times.append(own.created_at)
        if node_id in self.bad_path:
            times.append(self.bad_path[node_id])
        return min(times, default=None)

    def example_at(self, node: TreeNode) -> float | None:
        """When the block became an SFT example (the earliest evidence that makes it one),
        or None if it is not one. A block already judged wrong (rejected, rewritten, or it
        raised after it was approved) is one only by its own good label."""
        if node.author is Author.RUNTIME or self.tainted(node.id):
            return None
        times = [self.good_label_at(node.id)]
        if not self.judged(node):
            times.append(self.approved.get(node.id))
            if is_operator_edit(node):
                times.append(node.created_at)
        return min((t for t in times if t is not None), default=None)

    # -- the rules -----------------------------------------------------------------------

    def sft_examples(self, *, since: float | None = None, changed_only: bool = False) -> list[int]:
        """Ids of the blocks that are SFT examples, in id order. With `since`, only those
        whose evidence was given at or after it; with `changed_only`, only those the
        operator wrote (their edits and rewrites), not the model's they approved."""
        found = []
        for node_id in sorted(self.nodes):
            node = self.nodes[node_id]
            if changed_only and node.author is not Author.OPERATOR:
                continue
            when = self.example_at(node)
            if when is not None and (since is None or when >= since):
                found.append(node_id)
        return found

    def dpo_pairs(self, *, since: float | None = None) -> list[Pair]:
        """Preferred/dispreferred sibling pairs (same parent, same kind), each once, in
        (chosen, rejected) order. A pair whose chosen side is tainted is dropped, and so
        are two pairs that contradict each other (A over B and B over A)."""
        found: dict[tuple[int, int], tuple[PairRule, float]] = {}

        def add(chosen: int, rejected: int, rule: PairRule, when: float) -> None:
            if chosen != rejected:
                found.setdefault((chosen, rejected), (rule, when))

        for group in self._sibling_groups():
            ids = {n.id for n in group}
            goods = [(n.id, t) for n in group if (t := self.good_label_at(n.id)) is not None]
            bads = [(n.id, t) for n in group if (t := self.bad_label_at(n.id)) is not None]
            for good, good_at in goods:
                for bad, bad_at in bads:
                    add(good, bad, PairRule.LABELS, max(good_at, bad_at))
            yes = [(n.id, self.approved[n.id]) for n in group if n.id in self.approved]
            no = [(n.id, self.rejected[n.id]) for n in group if n.id in self.rejected]
            for good, good_at in yes:
                for bad, bad_at in no:
                    add(good, bad, PairRule.APPROVAL, max(good_at, bad_at))
            for node in group:
                if is_operator_edit(node) and node.edited_from_id in ids:
                    add(node.id, node.edited_from_id, PairRule.EDIT, node.created_at)
        for picked, replaced, when in self.picks:
            if self._siblings(picked, replaced):
                add(picked, replaced, PairRule.PICK, when)

        pairs = []
        for (chosen, rejected), (rule, when) in sorted(found.items()):
            if self.tainted(chosen):
                continue
            if (rejected, chosen) in found and not self.tainted(rejected):
                continue
            if since is None or when >= since:
                pairs.append(Pair(chosen, rejected, rule))
        return pairs

    def kto_examples(
        self, *, since: float | None = None, changed_only: bool = False
    ) -> list[tuple[int, bool]]:
        """(block id, desirable) for KTO, in id order: the SFT examples are desirable; a
        block labelled bad, rejected by the operator, or rewritten by them is undesirable.
        Unpaired: a label on a block with no sibling counts. `changed_only` keeps, of the
        desirable ones, those the operator wrote."""
        good = set(self.sft_examples(since=since))
        found = [(i, True) for i in self.sft_examples(since=since, changed_only=changed_only)]
        for node_id, node in self.nodes.items():
            if node.author is Author.RUNTIME or node_id in good:
                continue
            times = [self.bad_label_at(node_id), self.rejected.get(node_id)]
            if node.status is NodeStatus.EDITED:
                times.append(node.updated_at)
            when = min((t for t in times if t is not None), default=None)
            if when is not None and (since is None or when >= since):
                found.append((node_id, False))
        return sorted(found)

    def _sibling_groups(self) -> Iterator[list[TreeNode]]:
        groups: dict[tuple[int | None, str], list[TreeNode]] = defaultdict(list)
        for node in self.nodes.values():
            groups[(node.parent_id, node.kind)].append(node)
        for group in groups.values():
            if len(group) > 1:
                yield sorted(group, key=lambda n: n.id)

    def _siblings(self, a: int, b: int) -> bool:
        first, second = self.nodes.get(a), self.nodes.get(b)
        return (
            first is not None
            and second is not None
            and first.parent_id == second.parent_id
            and first.kind == second.kind
        )


def is_operator_edit(node: TreeNode) -> bool:
    return node.author is Author.OPERATOR and node.edited_from_id is not None


# -- one session, or the whole store -------------------------------------------------------


def sft_examples(
    nodes: Iterable[TreeNode],
    labels: Mapping[int, Label],
    decisions: Iterable[Decision],
    *,
    since: float | None = None,
) -> list[int]:
    """The ids of a session's SFT examples: model- or operator-written blocks labelled
    good (or on a path labelled good), approved by the operator, or the operator's edits;
    never one covered by a bad label or under a node labelled bad.

    `nodes` is the session's tree (`store.tree` or `store.tree_outline`), `labels` its
    effective labels
    (`store.session_labels`), `decisions` its decisions (`store.session_decisions`)."""
    return SessionEvidence(nodes, labels, decisions).sft_examples(since=since)


def dpo_pairs(
    nodes: Iterable[TreeNode],
    labels: Mapping[int, Label],
    decisions: Iterable[Decision],
    *,
    since: float | None = None,
) -> list[Pair]:
    """A session's DPO pairs among same-parent siblings: good over bad labels, approved
    over rejected, the operator's edit over the model's original, a picked alternate over
    the one it replaced. Arguments as for `sft_examples`."""
    return SessionEvidence(nodes, labels, decisions).dpo_pairs(since=since)


def load_evidence(store: Evidence, session_id: int) -> SessionEvidence:
    """A session's evidence in three queries (tree outline, labels, decisions)."""
    return SessionEvidence(
        store.tree_outline(session_id),
        store.session_labels(session_id),
        store.session_decisions(session_id),
    )


def iter_session_counts(
    store: Evidence,
    *,
    since: float | None = None,
    sessions: Collection[int] | None = None,
    changed_only: bool = False,
) -> Iterator[tuple[int, Counts]]:
    """(session id, what its labels and verdicts make), one session in memory at a time.
    With `since`, sessions where nothing happened since then are not read at all; with
    `sessions`, only those; `changed_only` as in `SessionEvidence.sft_examples`."""
    for session_id in _chosen(store, since, sessions):
        evidence = load_evidence(store, session_id)
        examples = evidence.sft_examples(since=since, changed_only=changed_only)
        yield session_id, Counts(len(examples), len(evidence.dpo_pairs(since=since)))


def _chosen(store: Evidence, since: float | None, sessions: Collection[int] | None) -> list[int]:
    found = store.session_ids(active_since=since)
    return found if sessions is None else [i for i in found if i in set(sessions)]


def count_kto_examples(
    store: Evidence,
    since: float | None = None,
    sessions: Collection[int] | None = None,
    changed_only: bool = False,
) -> tuple[int, int]:
    """(desirable, undesirable) KTO examples the store's labels and verdicts make (those
    of `sessions` only, if given)."""
    good = bad = 0
    for session_id in _chosen(store, since, sessions):
        evidence = load_evidence(store, session_id)
        for _, desirable in evidence.kto_examples(since=since, changed_only=changed_only):
            good += desirable
            bad += not desirable
    return good, bad


def count_training_data(
    store: Evidence,
    since: float | None = None,
    sessions: Collection[int] | None = None,
    changed_only: bool = False,
) -> Counts:
    """How many SFT examples and DPO pairs the store's labels and verdicts make (only
    those whose evidence is from `since` on, and of `sessions`, if given)."""
    examples = pairs = 0
    counted = iter_session_counts(store, since=since, sessions=sessions, changed_only=changed_only)
    for _, counts in counted:
        examples += counts.sft_examples
        pairs += counts.dpo_pairs
    return Counts(examples, pairs)


class TrainingTally:
    """What the whole store's labels and verdicts make, kept current by recounting only
    the sessions where something happened since the last count (`session_ids`'
    `active_since`): after one label that is one session, not the store.

    Safe to refresh from worker threads: refreshes take turns, and one that is told to
    stop leaves the tally as it was for the next one to finish.
    """

    def __init__(self) -> None:
        self.by_session: dict[int, Counts] = {}
        self.checked_at: float | None = None
        self._lock = threading.Lock()

    @property
    def total(self) -> Counts:
        counts = list(self.by_session.values())
        return Counts(sum(c.sft_examples for c in counts), sum(c.dpo_pairs for c in counts))

    def refresh(
        self, store: Evidence, *, should_stop: Callable[[], bool] = lambda: False
    ) -> Counts | None:
        """Recount what changed; the new total, or None when told to stop first."""
        with self._lock:
            # Taken before reading: whatever is written meanwhile is recounted next time.
            started = time.time()
            for session_id in store.session_ids(active_since=self.checked_at):
                if should_stop():
                    return None
                evidence = load_evidence(store, session_id)
                self.by_session[session_id] = Counts(
                    len(evidence.sft_examples()), len(evidence.dpo_pairs())
                )
            self.checked_at = started
            return self.total


# -- suggestions for the label queue -------------------------------------------------------


def suggest(
    node: Node, decisions: Sequence[Decision], evaluations: Sequence[EvaluationResult]
) -> Suggestion | None:
    """The label the evidence clearly points to, or None when it doesn't.

    `decisions` are the block's own; `evaluations` are its tick's. Evaluations judge what
    ran, so they suggest a label only for a block that was executed: an alternate shares
    its tick's evaluations with the action that ran instead of it.
    """
    own = [d for d in decisions if d.node_id == node.id]
    rejections = [d for d in own if d.verdict is Verdict.REJECT and d.actor is Actor.OPERATOR]
    by_policy = any(d.actor is not Actor.OPERATOR for d in own)
    if rejections or (node.status is NodeStatus.REJECTED and not by_policy):
        reason = ((rejections[-1].reason if rejections else None) or "").strip()
        return Suggestion(
            LabelValue.BAD, f"the operator rejected it: {reason or 'no reason given'}"
        )
    if node.status is NodeStatus.EDITED:
        return Suggestion(LabelValue.BAD, "the operator rewrote it")
    if node.status is NodeStatus.FAILED:
        error = str(node.meta.get("error") or "").strip()
        # A traceback ends with the exception itself.
        last = error.splitlines()[-1].strip() if error else ""
        return Suggestion(LabelValue.BAD, f"it raised: {last}" if last else "it raised")
    callbacks = [e for e in evaluations if e.kind is EvaluationKind.CALLBACK]
    if node.status is not NodeStatus.EXECUTED or not callbacks:
        return None
    if all(evaluation_failed(e) for e in callbacks):
        return Suggestion(LabelValue.BAD, f"every evaluation of its tick failed ({len(callbacks)})")
    if all(evaluation_passed(e) for e in callbacks):
        return Suggestion(
            LabelValue.GOOD, f"it ran and every evaluation of its tick passed ({len(callbacks)})"
        )
    return None


def evaluation_passed(result: EvaluationResult) -> bool:
    return result.passed is True and result.error is None


def evaluation_failed(result: EvaluationResult) -> bool:
    return result.passed is False or result.error is not None
