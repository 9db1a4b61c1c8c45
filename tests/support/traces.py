"""Realistic trace sessions of any size, written fast, for tests and benchmarks.

`build_session(store, blocks=50_000)` writes a session shaped like the runtime's own
(agents/runtime/tick.py): tick 0 is a `genesis` block; every later tick runs task-reminder,
two observations, orientation, an action with three alternates as its siblings,
expectation, option, evaluation and outcome, each block a child of the previous block on
the chain, with the detours a real session takes (a failed action with its error, debug
and second attempt; a rejected action with the operator's feedback; an operator edit; a
picked alternate). Every rejection, edit, pick and failed attempt has its stored
decision, as do the plain approvals of every third tick (the rest are left out: each
decision is its own write); every eighth outcome and every tenth observation carries
evaluation rows (some failing); one tick in forty has a labelled block.

Nodes go in through `TraceStore.add_nodes` in batches of up to a few thousand, using
`parent_index` within a batch: 50,000 nodes take a few seconds. Decisions, evaluations
and labels go through the store's own calls (about half a millisecond each, about one
per two ticks), so the whole session is written through the public API. The same seed gives
the same tree (texts, kinds, statuses, scores, shape); only wall-clock timestamps differ.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

from agents import blocks as k
from agents.blocks import OPTION_QUESTION, OUTCOME_QUESTION, QUESTIONS
from storage import (
    Actor,
    Author,
    EvaluationKind,
    LabelScope,
    LabelValue,
    NewNode,
    NodeStatus,
    SessionStatus,
    TraceStore,
    Verdict,
)

#: Most nodes per `add_nodes` call: one multi-row INSERT of this size takes ~60 ms.
BATCH = 2000
#: The header timestamp of block 0; later blocks follow a few seconds apart.
EPOCH = 1_740_912_854.0

TASK = (
    "Break the Vigenère cipher in cipher.txt: find the key, write the plaintext to "
    "solution.txt and make the checks in test_solution.py pass."
)
ACTIONS = [
    ("Estimate the key length with the index of coincidence", "ic_key_length"),
    ("Run the Kasiski examination on repeated trigrams", "kasiski"),
    ("Score candidate keys by chi-squared against English", "chi_squared"),
    ("Decrypt with the best key and write solution.txt", "write_solution"),
    ("Run the checks in test_solution.py", "run_checks"),
    ("Inspect the first lines of cipher.txt", "inspect_cipher"),
    ("Try every key length from 2 to 20 and keep the best", "sweep_lengths"),
]
FILES = ["cipher.txt", "solve.py", "test_solution.py", "notes.md", "solution.txt"]
ORIENTATIONS = [
    "The last action {outcome}. The index of coincidence peaks at length {n}, which "
    "suggests the key has {n} letters; before decrypting I should confirm it with the "
    "Kasiski distances, because a multiple of the true length scores almost as well.",
    "My expectation was that {file} would change; it {outcome}. The cheapest next step is "
    "to look at the output again and check whether the frequency table is skewed by the "
    "punctuation I did not strip.",
    "Two hypotheses remain: the key has length {n}, or the ciphertext was padded. If the "
    "chi-squared scores for each column drop below 40 with length {n}, the first one "
    "holds, and I can decrypt and run the checks.",
]
ERRORS = [
    'Traceback (most recent call last):\n  File "solve.py", line {line}, in <module>\n'
    "    key = best_key(columns)\nValueError: max() arg is an empty sequence",
    'Traceback (most recent call last):\n  File "<action>", line {line}, in action\n'
    "    text = open('cipher.txt').read()\nFileNotFoundError: [Errno 2] No such file or "
    "directory: 'cipher.txt'",
    "TimeoutError: the action ran past its 30 s limit and was stopped",
]
REJECTIONS = [
    "Don't overwrite solution.txt before the key is confirmed.",
    "This deletes notes.md; keep it.",
    "Too broad: test one key length first.",
]


@dataclass
class _Item:
    new: NewNode
    parent: int | None  # local index of the parent item
    edited_from: int | None = None  # local index of the node this edits


@dataclass
class _Session:
    """Nodes and their annotations, referring to each other by local index until stored."""

    rng: random.Random
    items: list[_Item] = field(default_factory=list)
    decisions: list[tuple[int, Verdict, Actor, str | None, int | None]] = field(
        default_factory=list
    )
    evaluations: list[tuple[int, str, EvaluationKind, Any, bool | None, str | None]] = field(
        default_factory=list
    )
    labels: list[tuple[int, LabelValue, LabelScope, str | None]] = field(default_factory=list)
    clock: float = EPOCH

    def add(
        self,
        kind: str,
        text: str,
        tick: int,
        parent: int | None,
        *,
        status: NodeStatus = NodeStatus.CHOSEN,
        author: Author | None = None,
        title: str | None = None,
        edited_from: int | None = None,
    ) -> int:
        """Append a block; returns its local index. Model blocks get an evaluator score."""
        if author is None:
            author = Author.MODEL if kind in k.MODEL_KINDS else Author.RUNTIME
        self.clock += self.rng.uniform(0.5, 9.0)
        header = k.Header(kind, len(self.items), tick, self.clock, title)
        meta: dict[str, Any] = header.meta()
        score: float | None = None
        parts: dict[str, float] = {}
        question = QUESTIONS.get(kind)
        if kind == k.OPTION:
            question = OPTION_QUESTION
        elif kind == k.OUTCOME:
            question = OUTCOME_QUESTION
        if question is not None:
            log_odds = round(self.rng.gauss(0.8, 1.6), 3)
            parts["evaluator"] = log_odds
            if kind == k.ACTION and self.rng.random() < 0.2:
                parts["lint"] = -0.5
            score = round(sum(parts.values()), 3)
            meta["q"] = question
        new = NewNode(
            kind=kind,
            text=text,
            tick=tick,
            author=author,
            status=status,
            score=score,
            score_parts=parts,
            sampling={"temperature": 0.8, "n": 4} if author is Author.MODEL else {},
            meta=meta,
        )
        self.items.append(_Item(new, parent, edited_from))
        return len(self.items) - 1

    def set_status(self, index: int, status: NodeStatus) -> None:
        item = self.items[index]
        item.new = dataclasses.replace(item.new, status=status)

    def decide(
        self,
        index: int,
        verdict: Verdict,
        *,
        actor: Actor = Actor.POLICY,
        reason: str | None = None,
        result: int | None = None,
    ) -> None:
        self.decisions.append((index, verdict, actor, reason, result))


def _action_text(rng: random.Random) -> tuple[str, str]:
    title, slug = rng.choice(ACTIONS)
    length = rng.randint(2, 20)
    script = rng.choice(["solve.py", "test_solution.py"])
    text = (
        f"def action_{slug}(subagent):\n"
        f'    """{title}."""\n'
        "    import subprocess\n\n"
        "    result = subprocess.run(\n"
        f'        ["python", "{script}", "--key-length", "{length}"],\n'
        "        capture_output=True, text=True, timeout=20,\n"
        "    )\n"
        '    subagent.update_cache("last_run", result.stdout[-400:])\n'
        "    return result.returncode == 0\n\n"
        f'self.add_action("{title}", action_{slug})'
    )
    return text, title


def _evaluation_text(rng: random.Random) -> str:
    name = rng.choice(["solution_written", "key_is_letters", "plaintext_is_english"])
    return (
        f"def check_{name}(subagent):\n"
        "    from pathlib import Path\n\n"
        '    text = Path("solution.txt").read_text() if Path("solution.txt").exists() else ""\n'
        "    return len(text) > 0 and text.count(' ') > len(text) // 12\n\n"
        f'self.add_evaluation("Check {name.replace("_", " ")}", check_{name})'
    )


def _observation_text(rng: random.Random, tick: int) -> str:
    lines = [f"$ ls -la  (tick {tick})"]
    for name in FILES:
        lines.append(f"-rw-r--r-- 1 agent agent {rng.randint(80, 9000):>5} {name}")
    return "\n".join(lines)


def _tick(s: _Session, tick: int, chain: int) -> int:
    """One tick hung under `chain`; returns the last block on its chain."""
    rng = s.rng
    reminder = s.add(k.TASK_REMINDER, f"Task: Vigenère\n{TASK}", tick, chain)
    view = s.add(k.OBSERVATION, _observation_text(rng, tick), tick, reminder, title="Files")
    if tick % 10 == 0:
        s.evaluations.append((view, "Files", EvaluationKind.OBSERVATION, {"lines": 6}, None, None))
    output = s.add(
        k.OBSERVATION,
        f"$ python test_solution.py\n{rng.randint(0, 4)} passed, {rng.randint(0, 3)} failed",
        tick,
        view,
        title="Latest test output",
    )
    orientation = s.add(
        k.ORIENTATION,
        rng.choice(ORIENTATIONS).format(
            outcome=rng.choice(["succeeded", "failed", "timed out"]),
            n=rng.randint(3, 12),
            file=rng.choice(FILES),
        ),
        tick,
        output,
    )
    text, title = _action_text(rng)
    action = s.add(k.ACTION, text, tick, orientation, title=title)
    alternates = []
    for _ in range(3):
        alt_text, alt_title = _action_text(rng)
        alternates.append(
            s.add(
                k.ACTION,
                alt_text,
                tick,
                orientation,
                status=NodeStatus.ALTERNATE,
                title=alt_title,
            )
        )
    expectation = s.add(
        k.EXPECTATION,
        "The action succeeds if the command exits 0 and solution.txt reads as English; it "
        "fails if the key length is wrong, which shows as gibberish with few spaces.",
        tick,
        action,
    )
    failed_attempts = 0
    fate = rng.random()
    if fate < 0.70:  # approved and run
        s.set_status(action, NodeStatus.EXECUTED)
        if tick % 3 == 0:  # see the module docstring: most plain approvals are left out
            s.decide(action, Verdict.APPROVE, actor=rng.choice([Actor.POLICY, Actor.OPERATOR]))
        chain = expectation
    elif fate < 0.82:  # approved, raised: error, debug, a second attempt
        s.set_status(action, NodeStatus.FAILED)
        s.decide(action, Verdict.APPROVE)
        failed_attempts = 1
        error = s.add(
            k.ERROR, rng.choice(ERRORS).format(line=rng.randint(3, 80)), tick, expectation
        )
        debug = s.add(
            k.DEBUG,
            "The error says the columns list was empty: the key length was larger than the "
            "text I sliced. I'll slice the whole ciphertext instead of the first line.",
            tick,
            error,
        )
        retry_text, retry_title = _action_text(rng)
        retry = s.add(
            k.ACTION, retry_text, tick, debug, status=NodeStatus.EXECUTED, title=retry_title
        )
        s.decide(retry, Verdict.APPROVE)
        chain = s.add(k.EXPECTATION, "This time solution.txt should be written.", tick, retry)
    elif fate < 0.90:  # rejected by the operator, feedback, a second attempt
        reason = rng.choice(REJECTIONS)
        s.set_status(action, NodeStatus.REJECTED)
        s.decide(action, Verdict.REJECT, actor=Actor.OPERATOR, reason=reason)
        feedback = s.add(
            k.OBSERVATION,
            f"The operator rejected the action above without running it.\nReason: {reason}",
            tick,
            expectation,
            title="Operator feedback",
        )
        retry_text, retry_title = _action_text(rng)
        retry = s.add(
            k.ACTION, retry_text, tick, feedback, status=NodeStatus.EXECUTED, title=retry_title
        )
        s.decide(retry, Verdict.APPROVE, actor=Actor.OPERATOR)
        chain = s.add(k.EXPECTATION, "The narrower run should finish quickly.", tick, retry)
    elif fate < 0.96:  # the operator's edit: a new sibling that runs instead
        s.set_status(action, NodeStatus.EDITED)
        edited = s.add(
            k.ACTION,
            text.replace("timeout=20", "timeout=60"),
            tick,
            orientation,
            status=NodeStatus.EXECUTED,
            author=Author.OPERATOR,
            title=title,
            edited_from=action,
        )
        s.decide(action, Verdict.EDIT, actor=Actor.OPERATOR, result=edited)
        chain = s.add(k.EXPECTATION, "With the longer timeout it should finish.", tick, edited)
    else:  # the operator picks an alternate
        picked = alternates[0]
        s.set_status(action, NodeStatus.ALTERNATE)
        s.set_status(picked, NodeStatus.EXECUTED)
        s.decide(action, Verdict.PICK_ALTERNATE, actor=Actor.OPERATOR, result=picked)
        chain = s.add(k.EXPECTATION, "The alternate should make progress.", tick, picked)

    option = s.add(k.OPTION, rng.choice(["Yes.", "No."]), tick, chain)
    evaluation = s.add(k.EVALUATION, _evaluation_text(rng), tick, option)
    s.set_status(evaluation, NodeStatus.EXECUTED)
    passed = rng.random() < 0.6
    outcome_text = k.outcome_table(
        [
            (f"action: {title}", "True" if failed_attempts == 0 else "False"),
            ("Check solution written", "True" if passed else "False"),
        ]
    )
    outcome = s.add(k.OUTCOME, outcome_text, tick, evaluation)
    if tick % 8 == 1:
        s.evaluations.append(
            (outcome, "Check solution written", EvaluationKind.CALLBACK, passed, passed, None)
        )
        crashed = rng.random() < 0.15
        s.evaluations.append(
            (
                outcome,
                "Check key is letters",
                EvaluationKind.CALLBACK,
                None if crashed else True,
                not crashed,
                "NameError: name 'key' is not defined" if crashed else None,
            )
        )
        log_odds = round(rng.gauss(0.5, 1.5), 3)
        s.evaluations.append(
            (outcome, OUTCOME_QUESTION, EvaluationKind.LOGIT, log_odds, log_odds > 0, None)
        )
    if tick % 40 == 1:
        s.labels.append((outcome, LabelValue.GOOD, LabelScope.PATH, "steady progress"))
    if tick % 40 == 21:
        s.labels.append((action, LabelValue.BAD, LabelScope.BLOCK, "wrong key length"))
    return outcome


def build_session(
    store: TraceStore,
    *,
    blocks: int,
    seed: int = 0,
    title: str = "",
    status: SessionStatus = SessionStatus.COMPLETED,
) -> int:
    """Write a session of exactly `blocks` nodes (the last tick may be cut short, as in a
    session that is still running) and return its id. `title` defaults to one naming the
    size and seed."""
    if blocks < 1:
        raise ValueError("a session needs at least one block (its genesis)")
    s = _Session(random.Random(seed))
    chain = s.add(
        k.GENESIS,
        f'"""agent-console session: Vigenère\n\nThe task:\n{TASK}\n"""',
        0,
        None,
    )
    tick = 1
    while len(s.items) < blocks:
        chain = _tick(s, tick, chain)
        tick += 1
    del s.items[blocks:]

    session = store.create_session(
        TASK,
        title=title or f"Vigenère, {blocks:,} blocks (seed {seed})",
        backend="openai",
        model="tiny",
        settings={"candidates": 4, "approval": "ask", "seed": seed},
        status=status,
    )
    ids = _store_nodes(store, session.id, s.items)
    for index, verdict, actor, reason, result in s.decisions:
        if index < blocks and (result is None or result < blocks):
            store.record_decision(
                ids[index],
                verdict,
                actor=actor,
                reason=reason,
                result_node_id=None if result is None else ids[result],
            )
    for index, name, kind, value, passed, error in s.evaluations:
        if index < blocks:
            store.record_evaluation(
                ids[index],
                name,
                kind=kind,
                result=value,
                passed=passed,
                error=error,
                duration=round(s.rng.uniform(0.01, 2.0), 3),
            )
    for index, value, scope, note in s.labels:
        if index < blocks:
            store.add_label(ids[index], value, scope=scope, note=note)
    return session.id


def _store_nodes(store: TraceStore, session_id: int, items: list[_Item]) -> list[int]:
    """Insert in batches; a batch ends early where an edit names a node of the same batch
    (`edited_from_id` needs a stored id)."""
    ids: list[int] = []
    batch: list[NewNode] = []
    start = 0

    def flush() -> None:
        nonlocal start
        ids.extend(node.id for node in store.add_nodes(session_id, batch))
        start += len(batch)
        batch.clear()

    for item in items:
        if len(batch) >= BATCH or (item.edited_from is not None and item.edited_from >= start):
            flush()
        parent_id = parent_index = None
        if item.parent is not None:
            if item.parent >= start:
                parent_index = item.parent - start
            else:
                parent_id = ids[item.parent]
        batch.append(
            dataclasses.replace(
                item.new,
                parent_id=parent_id,
                parent_index=parent_index,
                edited_from_id=None if item.edited_from is None else ids[item.edited_from],
            )
        )
    if batch:
        flush()
    return ids
