"""Training data from the store: SFT examples, DPO pairs and token-exact samples.

Which blocks are data is `training.rules`' question; this module turns the answer into
rows. A row's prompt is re-rendered from the stored tree exactly as the agent saw it
(`agents.blocks.block_prompt`) and checked against the hash the runtime stored when it
sampled the block: a prompt that no longer renders to that hash is reported and left
out, never trained on. A block without a stored hash (built by hand or imported) is taken
as it renders and counted as unchecked.

The agent's context is one text document, not a chat, so the rows trl trains on are its
standard prompt/completion form (trl computes the loss on the completion only):

    sft     {"prompt": str, "completion": str, ...ids}
    dpo     {"prompt": str, "chosen": str, "rejected": str, ...ids}
    tokens  {"prompt_ids", "completion_ids", "logprobs", "loss_mask", "status", ...}

`chat=True` writes trl's conversational form instead (the prompt as a user message, the
completion as the assistant's), for a chat model trained outside this loop. A block the
agent asked a chat model for (`agents.prompting`, its node's `prompt` meta) is always
written in that form, its prompt the very turns it was asked with and its completion its
reply (a code block in its fence; the template's end of turn ends it).

Streaming: one session at a time, and of a session only the blocks the rows need (the
examples and their ancestors), so the store's size does not bound memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from agents import blocks, forms, prompting
from storage import Author, Node
from training.rules import Pair, SessionEvidence, load_evidence

if TYPE_CHECKING:
    from storage import TraceStore


class DatasetKind(StrEnum):
    SFT = "sft"
    DPO = "dpo"
    KTO = "kto"
    TOKENS = "tokens"


class Mismatch(NamedTuple):
    """A block left out because its prompt no longer renders as it was sampled."""

    session_id: int
    node_id: int
    reason: str

    def __str__(self) -> str:
        return f"session {self.session_id}, block {self.node_id}: {self.reason}"


@dataclass
class BuildReport:
    kind: DatasetKind
    rows: int = 0
    #: sessions that gave at least one row
    sessions: int = 0
    #: rows whose blocks had no stored prompt hash to check against
    unchecked: int = 0
    mismatches: list[Mismatch] = field(default_factory=list)
    #: blocks read from the store to render the prompts (the rows' blocks and ancestors)
    blocks_read: int = 0
    out: Path | None = None

    def describe(self) -> str:
        """One line for the operator."""
        noun = {
            DatasetKind.SFT: "SFT examples",
            DatasetKind.DPO: "DPO pairs",
            DatasetKind.KTO: "KTO examples",
            DatasetKind.TOKENS: "token-exact samples",
        }[self.kind]
        line = f"{self.rows} {noun} from {self.sessions} session(s)"
        if self.out is not None:
            line = f"wrote {line} to {self.out}"
        if self.mismatches:
            first = self.mismatches[0]
            more = f" (and {len(self.mismatches) - 1} more)" if len(self.mismatches) > 1 else ""
            line += f"; left out {len(self.mismatches)}: {first}{more}"
        if self.unchecked:
            line += f"; {self.unchecked} had no stored prompt hash to check"
        return line


class PromptMismatchError(Exception):
    pass


Tokenize = Callable[[str], list[int]]


# -- prompts ---------------------------------------------------------------------------------


class _SessionView:
    """The blocks of one session that its rows need, with their ancestors, by id."""

    def __init__(
        self, store: TraceStore, evidence: SessionEvidence, targets: Iterable[int], tokens: bool
    ) -> None:
        wanted: set[int] = set()
        for node_id in targets:
            current: int | None = node_id
            while current is not None and current not in wanted:
                wanted.add(current)
                outline = evidence.nodes.get(current)
                current = outline.parent_id if outline is not None else None
        self.nodes: dict[int, Node] = store.nodes_by_id(wanted, with_tokens=tokens)
        self._rendered: dict[int, str] = {}

    def parent_path(self, node: Node) -> list[Node]:
        path = []
        current = node.parent_id
        while current is not None:
            parent = self.nodes[current]
            path.append(parent)
            current = parent.parent_id
        path.reverse()
        return path

    def prompt(self, node: Node) -> tuple[str, bool]:
        """The block's prompt and whether a stored hash vouched for it; raises
        PromptMismatchError when the hash is there and disagrees."""
        prompt = blocks.block_prompt(self.parent_path(node), node)
        if node.prompt_hash is None:
            return prompt, False
        if blocks.prompt_hash(prompt) != node.prompt_hash:
            raise PromptMismatchError(
                "its prompt no longer renders to the hash stored when it was sampled"
            )
        return prompt, True


# -- rows --------------------------------------------------------------------------------------


def chat_prompt(view_path: Sequence[Node], node: Node) -> list[dict[str, str]] | None:
    """The turns a block asked for in chat (`agents.prompting`) was written after; None
    for a block the model continued a document for."""
    if node.meta.get("prompt") != prompting.CHAT:
        return None
    form = str(node.meta.get("form") or forms.CALLBACK)
    return prompting.block_turns(view_path, node.meta.get("collapsed", ()), node.kind, form)


def _message(role: str, text: str) -> list[dict[str, str]]:
    return [{"role": role, "content": text}]


def _sft_row(
    prompt: str, node: Node, chat: bool, turns: list[dict[str, str]] | None = None
) -> dict[str, Any]:
    completion = blocks.block_completion(node)
    row: dict[str, Any] = (
        {
            "prompt": turns,
            "completion": _message("assistant", prompting.reply(node.kind, node.text)),
        }
        if turns is not None
        else {"prompt": _message("user", prompt), "completion": _message("assistant", completion)}
        if chat
        else {"prompt": prompt, "completion": completion}
    )
    row.update(session_id=node.session_id, node_id=node.id, kind=node.kind)
    return row


def _dpo_row(
    prompt: str,
    chosen: Node,
    rejected: Node,
    pair: Pair,
    chat: bool,
    turns: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    good, bad = blocks.block_completion(chosen), blocks.block_completion(rejected)
    row: dict[str, Any] = (
        {
            "prompt": turns,
            "chosen": _message("assistant", prompting.reply(chosen.kind, chosen.text)),
            "rejected": _message("assistant", prompting.reply(rejected.kind, rejected.text)),
        }
        if turns is not None
        else {
            "prompt": _message("user", prompt),
            "chosen": _message("assistant", good),
            "rejected": _message("assistant", bad),
        }
        if chat
        else {"prompt": prompt, "chosen": good, "rejected": bad}
    )
    row.update(
        session_id=chosen.session_id,
        chosen_id=chosen.id,
        rejected_id=rejected.id,
        rule=pair.rule.value,
        kind=chosen.kind,
    )
    return row


def _token_row(
    prompt: str,
    node: Node,
    tokenize: Tokenize,
    status: str,
    label: str | None,
    example: bool,
) -> dict[str, Any]:
    prompt_ids = tokenize(prompt)
    sampled = node.author is Author.MODEL and node.token_ids is not None
    if sampled:
        completion_ids = list(node.token_ids or [])
        logprobs: list[float] | None = list(node.logprobs or [])
    else:  # the operator's text: no sampling to be exact about
        completion_ids, logprobs = tokenize(blocks.block_completion(node)), None
    return {
        "session_id": node.session_id,
        "node_id": node.id,
        "kind": node.kind,
        "author": node.author.value,
        "node_status": node.status.value,
        "status": status,
        "truncated": node.truncated,
        "label": label,
        "sft_example": example,
        "prompt_ids": prompt_ids,
        "completion_ids": completion_ids,
        "logprobs": logprobs,
        "loss_mask": [0] * len(prompt_ids) + [1] * len(completion_ids),
        "sampling": node.sampling,
    }


# -- building ------------------------------------------------------------------------------


def iter_rows(
    store: TraceStore,
    kind: DatasetKind | str,
    *,
    since: float | None = None,
    session_ids: Sequence[int] | None = None,
    tokenize: Tokenize | None = None,
    chat: bool = False,
    report: BuildReport | None = None,
    changed_only: bool = False,
) -> Iterator[dict[str, Any]]:
    """The rows of one dataset, a session at a time. `since` keeps only data whose
    evidence (label, verdict, edit) is from then on; `session_ids` limits the sessions;
    `tokenize` is required for the token-exact form; `changed_only` keeps, of the SFT
    examples (KTO's desirable ones), only the blocks the operator wrote: their edits and
    rewrites, not the model's blocks they approved. Mismatches go to `report`."""
    kind = DatasetKind(kind)
    if kind is DatasetKind.TOKENS and tokenize is None:
        raise ValueError("the token-exact form needs a tokenizer")
    report = report if report is not None else BuildReport(kind)
    sessions = session_ids if session_ids is not None else store.session_ids(active_since=since)
    for session_id in sessions:
        evidence = load_evidence(store, session_id)
        before = report.rows
        if kind is DatasetKind.SFT:
            yield from _session_sft(
                store, evidence, session_id, since, chat, report, changed_only=changed_only
            )
        elif kind is DatasetKind.DPO:
            yield from _session_dpo(store, evidence, session_id, since, chat, report)
        elif kind is DatasetKind.KTO:
            yield from _session_sft(
                store,
                evidence,
                session_id,
                since,
                chat,
                report,
                kto=True,
                changed_only=changed_only,
            )
        else:
            assert tokenize is not None
            yield from _session_tokens(store, evidence, session_id, since, tokenize, report)
        if report.rows > before:
            report.sessions += 1


def _prompted(
    view: _SessionView, node_ids: Iterable[int], session_id: int, report: BuildReport
) -> Iterator[tuple[Node, str]]:
    """Each block with its checked prompt, one row each in `report`; a block whose prompt
    no longer matches its hash goes to the report's mismatches instead."""
    report.blocks_read += len(view.nodes)
    for node_id in node_ids:
        node = view.nodes[node_id]
        try:
            prompt, checked = view.prompt(node)
        except PromptMismatchError as exc:
            report.mismatches.append(Mismatch(session_id, node_id, str(exc)))
            continue
        report.rows += 1
        report.unchecked += not checked
        yield node, prompt


def _session_sft(
    store: TraceStore,
    evidence: SessionEvidence,
    session_id: int,
    since: float | None,
    chat: bool,
    report: BuildReport,
    *,
    kto: bool = False,
    changed_only: bool = False,
) -> Iterator[dict[str, Any]]:
    """SFT rows; with `kto`, KTO's: the SFT examples and the undesirable blocks, each with
    its `label`. With `changed_only`, an example the model wrote is left out."""
    labels = (
        dict(evidence.kto_examples(since=since, changed_only=changed_only))
        if kto
        else dict.fromkeys(evidence.sft_examples(since=since, changed_only=changed_only), True)
    )
    if not labels:
        return
    view = _SessionView(store, evidence, list(labels), tokens=False)
    for node, prompt in _prompted(view, sorted(labels), session_id, report):
        row = _sft_row(prompt, node, chat, chat_prompt(view.parent_path(node), node))
        if kto:
            row["label"] = labels[node.id]
        yield row


def _session_dpo(
    store: TraceStore,
    evidence: SessionEvidence,
    session_id: int,
    since: float | None,
    chat: bool,
    report: BuildReport,
) -> Iterator[dict[str, Any]]:
    pairs = evidence.dpo_pairs(since=since)
    if not pairs:
        return
    view = _SessionView(
        store, evidence, [i for p in pairs for i in (p.chosen_id, p.rejected_id)], tokens=False
    )
    report.blocks_read += len(view.nodes)
    for pair in pairs:
        chosen, rejected = view.nodes[pair.chosen_id], view.nodes[pair.rejected_id]
        try:
            # Siblings share the context; each side's own header must match its own hash.
            prompt, chosen_checked = view.prompt(chosen)
            _, rejected_checked = view.prompt(rejected)
        except PromptMismatchError as exc:
            report.mismatches.append(
                Mismatch(session_id, pair.chosen_id, f"pair with {pair.rejected_id}: {exc}")
            )
            continue
        report.rows += 1
        report.unchecked += not (chosen_checked and rejected_checked)
        turns = chat_prompt(view.parent_path(chosen), chosen)
        yield _dpo_row(prompt, chosen, rejected, pair, chat, turns)


def _session_tokens(
    store: TraceStore,
    evidence: SessionEvidence,
    session_id: int,
    since: float | None,
    tokenize: Tokenize,
    report: BuildReport,
) -> Iterator[dict[str, Any]]:
    """Every block the model sampled, and every operator edit, with what the labels
    make of it: what an RL trainer scores and learns from."""
    examples = set(evidence.sft_examples())
    wanted = [
        n.id
        for n in evidence.nodes.values()
        if (n.author is Author.MODEL or (n.author is Author.OPERATOR and n.edited_from_id))
        and (since is None or n.created_at >= since or n.id in examples)
    ]
    if not wanted:
        return
    status = store.get_session(session_id).status.value
    view = _SessionView(store, evidence, wanted, tokens=True)
    for node, prompt in _prompted(view, sorted(wanted), session_id, report):
        label = None
        if evidence.tainted(node.id):
            label = "bad"
        elif evidence.good_label_at(node.id) is not None:
            label = "good"
        yield _token_row(prompt, node, tokenize, status, label, node.id in examples)


def write_jsonl(
    store: TraceStore,
    kind: DatasetKind | str,
    out: Path | str,
    *,
    since: float | None = None,
    session_ids: Sequence[int] | None = None,
    tokenize: Tokenize | None = None,
    chat: bool = False,
    changed_only: bool = False,
) -> BuildReport:
    """Write a dataset as JSON lines, atomically: the file appears whole or not at all
    (a partial file from a killed build never looks like a dataset)."""
    out = Path(out)
    report = BuildReport(DatasetKind(kind), out=out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            for row in iter_rows(
                store,
                kind,
                since=since,
                session_ids=session_ids,
                tokenize=tokenize,
                chat=chat,
                report=report,
                changed_only=changed_only,
            ):
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return report


def hf_tokenizer(model: str) -> Tokenize:
    """The model's own tokenizer (no special tokens added), as the backends tokenize."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)

    def tokenize(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    return tokenize


def parse_since(text: str) -> float:
    """An ISO date or date-time (local time when no zone is given) as a Unix time; raises
    ValueError with a message that names the accepted forms."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is not a date: use YYYY-MM-DD or YYYY-MM-DDTHH:MM[:SS]"
        ) from None
    return moment.timestamp()
