"""weave-agent interoperability: its event traces in, ours out.

weave-agent (JD-P/minihf, folder agent/) dumps, per tick, an `event_trace_<time>.json`: the
whole event stream so far as a list of block dicts. `import_paths` turns each trace into a
session of the trace store, so it can be browsed, labelled and trained on like our own:

- blocks become nodes in stream order, one chain; ticks are counted at each orientation
  (the task reminder and observations before it belong to its tick);
- a block's fields all stay in the node's metadata in their order (`blocks.to_weave` gives
  the dict back), its question and score become the node's `q` and evaluator log-odds, its
  `candidates` become alternate siblings, an executed block's `outcome` and each row of an
  outcome block's table become evaluation rows, and error blocks stay error blocks;
- the session is keyed by the hash of the trace's first block and each node by the hash
  of its block, so importing a file again adds nothing, and importing a later dump of the
  same run adds only its new blocks (and the outcomes weave-agent wrote into earlier ones);
- each model-written block gets the hash of the prompt our renderer gives it, so the
  training data builders check it like any other.

Also read: a dict with the trace as `trace` (JSON text or a list) and a `category`, one
per line in `.jsonl` or `.jsonl.gz` shards (weave-agent's `traces2shards.py`); a category
of `good` or `bad` labels the whole path.

`export_session` writes one of our sessions in weave-agent's format: the chosen path as
`event_trace_<time>.json` and its rendering as `rendered_trace_<time>.py`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agents import blocks
from agents.user_files import UserFileError, read_user_file, size_words
from storage import (
    Author,
    EvaluationKind,
    LabelScope,
    LabelValue,
    NewNode,
    Node,
    NodeStatus,
    SessionStatus,
    TraceStore,
)

#: Settings key of an imported session: {"key": first block's hash, "source": file name}.
SESSION_SETTING = "weave"
#: The largest trace file read (weave-agent's run to tens of megabytes).
MAX_FILE_BYTES = 1 << 30
#: What the evaluation row of a block's own run is called.
RUN_EVALUATION = "runs without errors"
#: weave-agent writes this result for an evaluation that raised.
ERROR_RESULT = "ERROR"
#: Model-written kinds that only weave-agent has.
WEAVE_MODEL_KINDS = frozenset({blocks.TASK_INFERENCE})
#: Runtime blocks that open a tick (they come before its orientation).
_TICK_OPENERS = frozenset({blocks.TASK_REMINDER, blocks.OBSERVATION})
#: Candidate fields that belong to the chosen block only.
_CHOSEN_ONLY = ("candidates", "outcome", "reward", "raw_score")
_TRACE_NAME = re.compile(r"(\d+(?:\.\d+)?)")


class TraceFormatError(ValueError):
    """A file that is not a weave-agent trace; the message says where and why."""


@dataclass
class FileReport:
    path: str
    #: one line per trace in the file: its session and what importing it did
    traces: list[str] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    error: str | None = None

    def describe(self) -> str:
        if self.error is not None:
            return f"{self.path}: error: {self.error}"
        return f"{self.path}: " + "; ".join(self.traces)


@dataclass
class ImportReport:
    files: list[FileReport] = field(default_factory=list)

    @property
    def failed(self) -> list[FileReport]:
        return [f for f in self.files if f.error is not None]

    @property
    def sessions(self) -> list[int]:
        return sorted({s for f in self.files for s in f.sessions})

    def describe(self) -> str:
        added = sum(f.added for f in self.files)
        ok = len(self.files) - len(self.failed)
        line = (
            f"{ok} of {len(self.files)} file(s) imported into {len(self.sessions)} session(s): "
            f"{added} block(s) added"
        )
        updated = sum(f.updated for f in self.files)
        if updated:
            line += f", {updated} updated"
        return line


@dataclass(frozen=True)
class Trace:
    blocks: list[dict[str, Any]]
    category: str | None = None


# -- reading -------------------------------------------------------------------------------


def trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files to import: each file as given, and a folder's trace files (JSON, JSON
    lines, gzipped JSON lines), each folder's in the order weave-agent wrote them."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            inside = [
                p
                for p in path.rglob("*")
                if p.is_file() and p.name.endswith((".json", ".jsonl", ".jsonl.gz", ".json.gz"))
            ]
            found.extend(sorted(inside, key=_written_order))
        else:
            found.append(path)
    return found


def _written_order(path: Path) -> tuple[str, float, str]:
    """Folder, then the time in weave-agent's file name (event_trace_1737530984.json)."""
    match = _TRACE_NAME.search(path.name)
    return (str(path.parent), float(match.group(1)) if match else math.inf, path.name)


def read_traces(path: Path) -> list[Trace]:
    """The traces in one file, checked; `TraceFormatError` says what is wrong."""
    try:
        raw = read_user_file(path, MAX_FILE_BYTES, "trace file")
        if path.name.endswith(".gz"):
            # unpacked within the same bound: a small .gz can hold gigabytes of zeros
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as stream:
                raw = stream.read(MAX_FILE_BYTES + 1)
            if len(raw) > MAX_FILE_BYTES:
                raise UserFileError(f"unpacks to more than {size_words(MAX_FILE_BYTES)}")
        text = raw.decode("utf-8")
    except (OSError, EOFError, zlib.error) as exc:
        raise TraceFormatError(getattr(exc, "strerror", None) or str(exc)) from None
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"not UTF-8 text (byte {exc.start})") from None
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        traces = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                traces.append(_trace(_parse(line, f"line {number}: "), f"line {number}: "))
        if not traces:
            raise TraceFormatError("no traces in it")
        return traces
    return [_trace(_parse(text, ""), "")]


def _parse(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(
            f"{where}not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None


def _trace(data: Any, where: str) -> Trace:
    category = None
    if isinstance(data, dict) and "trace" in data:
        category = data.get("category")
        data = data["trace"]
        if isinstance(data, str):
            data = _parse(data, f"{where}its `trace`: ")
    if not isinstance(data, list):
        raise TraceFormatError(
            f"{where}expected a list of blocks (weave-agent's event_trace_*.json), "
            f"got {_json_type(data)}"
        )
    if not data:
        raise TraceFormatError(f"{where}the trace has no blocks")
    for number, block in enumerate(data):
        _check_block(block, f"{where}block {number}")
    return Trace(data, category if isinstance(category, str) else None)


def _check_block(block: Any, where: str) -> None:
    if not isinstance(block, dict):
        raise TraceFormatError(f"{where}: expected an object, got {_json_type(block)}")
    kind = block.get("type")
    if not isinstance(kind, str) or not kind:
        raise TraceFormatError(f'{where}: no "type"')
    if kind == blocks.OUTCOME:
        if not isinstance(block.get("table"), list):
            raise TraceFormatError(f'{where} (outcome): no "table" of results')
    elif kind in blocks.LEGACY_BODY_KEYS and blocks.weave_body(block) is None:
        legacy = blocks.LEGACY_BODY_KEYS[kind]
        raise TraceFormatError(f'{where} ({kind}): no "body" (nor "{legacy}")')
    elif kind == blocks.OPTION and not isinstance(block.get("body"), str):
        raise TraceFormatError(f'{where} (option): no "body"')
    index = block.get("index")
    if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
        raise TraceFormatError(f'{where}: "index" is {_json_type(index)}, not an integer')


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "true/false"}
    if value is None:
        return "null"
    return names.get(type(value), "a number" if isinstance(value, int | float) else "?")


# -- importing -----------------------------------------------------------------------------


def import_paths(
    store: TraceStore, paths: Iterable[str | Path], *, context_tokens: int = 0
) -> ImportReport:
    """Import every trace in `paths` (files or folders); a bad file is reported in its
    `FileReport` and the others still import. `context_tokens` > 0 collapses the oldest
    ticks of long traces in the training prompts, as the runtime does (estimated at three
    characters a token)."""
    report = ImportReport()
    for path in trace_files(paths):
        file_report = FileReport(str(path))
        report.files.append(file_report)
        try:
            traces = read_traces(path)
        except TraceFormatError as exc:
            file_report.error = str(exc)
            continue
        for trace in traces:
            _import_trace(store, trace, path, file_report, context_tokens)
    return report


@dataclass
class _Planned:
    """A node about to be added, with what it needs once it has an id."""

    new: NewNode
    block: dict[str, Any]
    provisional: Node


def _import_trace(
    store: TraceStore, trace: Trace, path: Path, report: FileReport, context_tokens: int
) -> None:
    key = blocks.block_hash(trace.blocks[0])
    found = store.sessions_with_setting(SESSION_SETTING, "key", key)
    if found:
        session = found[0]
        existing = store.tree(session.id)
    else:
        session = store.create_session(
            _task_of(trace.blocks),
            title=f"weave-agent {path.name}",
            backend="weave-agent",
            settings={SESSION_SETTING: {"key": key, "source": path.name}},
            status=SessionStatus.COMPLETED,
        )
        existing = []
    report.sessions.append(session.id)
    children: dict[int | None, list[Node]] = {}
    for node in existing:
        if node.status is not NodeStatus.ALTERNATE:
            children.setdefault(node.parent_id, []).append(node)

    ticks = _ticks(trace.blocks)
    chain = _Chain(context_tokens)  # the path so far, stored or provisional
    parent: Node | None = None
    planned: list[_Planned] = []
    added = updated = unchanged = 0
    for number, block in enumerate(trace.blocks):
        digest = blocks.block_hash(block)
        siblings = [] if planned else children.get(parent.id if parent else None, [])
        same = next((n for n in siblings if _weave(n).get("hash") == digest), None)
        if same is not None:
            unchanged += 1
        else:
            same = next((n for n in siblings if _same_block(n, block)), None)
            if same is not None:  # a later dump: weave-agent wrote an outcome or reward into it
                same = _update(store, same, block, digest)
                updated += 1
        if same is not None:
            parent = same
            chain.append(same)
            continue
        new = _new_node(block, ticks[number], digest)
        if planned:
            new = replace(new, parent_index=len(planned) - 1)
        else:
            new = replace(new, parent_id=parent.id if parent else None)
        provisional = _provisional(new, session.id, len(planned))
        if provisional.author is Author.MODEL:
            new = replace(new, prompt_hash=chain.prompt_hash(provisional))
        planned.append(_Planned(new, block, provisional))
        chain.append(provisional)
        parent = provisional
    stored = store.add_nodes(session.id, [p.new for p in planned]) if planned else []
    for item, node in zip(planned, stored, strict=True):
        _record_outcomes(store, node, item.block)
        _add_alternates(store, session.id, node, item.block)
    added = len(stored)
    if trace.category in (LabelValue.GOOD, LabelValue.BAD) and stored:
        leaf = stored[-1]
        store.add_label(
            leaf.id, trace.category, scope=LabelScope.PATH, note="imported: the trace's category"
        )
    report.added += added
    report.updated += updated
    report.unchanged += unchanged
    if not added and not updated:
        report.traces.append(f"already imported (session {session.id}, nothing new)")
    else:
        what = f"{added} block(s) added" + (f", {updated} updated" if updated else "")
        verb = "into" if found else "as"
        report.traces.append(f"{what} {verb} session {session.id}")


def _weave(node: Node) -> Mapping[str, Any]:
    value = node.meta.get(blocks.WEAVE_META)
    return value if isinstance(value, Mapping) else {}


def _same_block(node: Node, block: Mapping[str, Any]) -> bool:
    """The same block as a node imported from an earlier dump, give or take the fields
    weave-agent adds to a block after it was written."""
    earlier = blocks.to_weave(node)
    return all(
        earlier.get(key) == block.get(key) for key in ("type", "index", "timestamp")
    ) and blocks.weave_body(earlier) == blocks.weave_body(block)


def _task_of(trace: Sequence[Mapping[str, Any]]) -> str:
    for block in trace:
        if block.get("type") == blocks.TASK_REMINDER:
            body = blocks.weave_body(block)
            if isinstance(body, str) and body.strip():
                return body.strip()
    return "a weave-agent trace"


def _ticks(trace: Sequence[Mapping[str, Any]]) -> list[int]:
    """Each block's tick: ours where the trace has them, else counted at each orientation
    (the task reminder and observations right before it open its tick)."""
    ticks = []
    tick = 0
    for block in trace:
        if block.get("type") == blocks.ORIENTATION:
            tick += 1
        ticks.append(tick)
    for i in range(len(trace) - 2, -1, -1):
        if trace[i].get("type") in _TICK_OPENERS and ticks[i + 1] > ticks[i]:
            opener_or_orientation = trace[i + 1].get("type")
            if opener_or_orientation in _TICK_OPENERS | {blocks.ORIENTATION}:
                ticks[i] = ticks[i + 1]
    for i, block in enumerate(trace):
        extension = block.get(blocks.EXTENSION_KEY)
        if isinstance(extension, Mapping) and isinstance(extension.get("tick"), int):
            ticks[i] = extension["tick"]
    return ticks


def _weave_meta(block: Mapping[str, Any], digest: str) -> dict[str, Any]:
    """How a node keeps its block: the dict as JSON text (PostgreSQL's JSONB would reorder
    its keys, and has no NaN or Infinity), with a text body left out (it is the node's
    text) but its place kept."""
    body_key = "body" if "body" in block else blocks.LEGACY_BODY_KEYS.get(str(block["type"]))
    kept = dict(block)
    text_body = body_key is not None and isinstance(block.get(body_key), str)
    if text_body and body_key is not None:
        kept[body_key] = None
    return {
        "block": json.dumps(kept, ensure_ascii=False),
        "body_key": body_key if text_body else None,
        "hash": digest,
    }


def _text_of(block: Mapping[str, Any]) -> str:
    if block["type"] == blocks.OUTCOME:
        return blocks.outcome_table(block.get("table") or ())
    body = blocks.weave_body(block)
    if body is None:
        return ""
    return body if isinstance(body, str) else repr(body)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _new_node(block: dict[str, Any], tick: int, digest: str) -> NewNode:
    kind = str(block["type"])
    text = _text_of(block)
    extension = block.get(blocks.EXTENSION_KEY)
    ours = extension if isinstance(extension, Mapping) else {}
    meta: dict[str, Any] = {blocks.WEAVE_META: _weave_meta(block, digest)}
    if isinstance(block.get("index"), int):
        meta["index"] = block["index"]
    if _finite(block.get("timestamp")) is not None:
        meta["timestamp"] = block["timestamp"]
    question = block.get("q")
    if isinstance(question, str) and question:
        meta["q"] = question
    title = ours.get("title") or block.get("title")
    if kind == blocks.ACTION and not title:
        titles = blocks.registered_titles(text, "add_action")
        title = titles[-1] if titles else None
    if isinstance(title, str) and title:
        meta["title"] = title
    outcome = block.get("outcome")
    if isinstance(outcome, Mapping):
        meta["ok"] = not outcome.get("error")
    if kind == blocks.OUTCOME:
        verdicts = [_passed(row) for row in _evaluation_rows(block)]
        meta["passed"] = sum(1 for v in verdicts if v)
        meta["total"] = len(verdicts)

    # weave-agent gives a block it asked no question about a score of 2: not a score
    score = _finite(block.get("score")) if "q" in meta else None
    parts = {"evaluator": score} if score is not None else {}
    if isinstance(ours.get("score_parts"), Mapping):
        parts = {str(k): float(v) for k, v in ours["score_parts"].items() if _finite(v) is not None}
    if "score" in ours:
        score = _finite(ours["score"])
    return NewNode(
        kind=kind,
        text=text,
        tick=tick,
        author=_enum(Author, ours.get("author"), _author_of(kind)),
        status=_enum(NodeStatus, ours.get("status"), _status_of(kind, outcome)),
        score=score,
        score_parts=parts,
        truncated=bool(ours.get("truncated", False)),
        meta=meta,
    )


def _author_of(kind: str) -> Author:
    if kind in blocks.MODEL_KINDS or kind in WEAVE_MODEL_KINDS:
        return Author.MODEL
    return Author.RUNTIME


def _status_of(kind: str, outcome: Any) -> NodeStatus:
    if isinstance(outcome, Mapping):
        return NodeStatus.FAILED if outcome.get("error") else NodeStatus.EXECUTED
    return NodeStatus.CHOSEN


def _enum(enum: type[Any], value: Any, default: Any) -> Any:
    try:
        return enum(value) if value is not None else default
    except ValueError:
        return default


def _provisional(new: NewNode, session_id: int, number: int) -> Node:
    """The node as it will be stored, to render prompts before it has an id."""
    return Node(
        id=-1 - number,
        session_id=session_id,
        parent_id=new.parent_id,
        tick=new.tick,
        kind=new.kind,
        text=new.text,
        author=new.author,
        status=new.status,
        score=new.score,
        score_parts=new.score_parts,
        sampling=new.sampling,
        edited_from_id=None,
        truncated=new.truncated,
        prompt_hash=None,
        meta=new.meta,
        created_at=0.0,
        updated_at=0.0,
    )


class _Chain:
    """The path an import walks, with each block rendered once: a block's prompt is
    `blocks.block_prompt` of the path before it, computed without rendering that path
    again (a running hash of the whole context when nothing collapses)."""

    def __init__(self, context_tokens: int) -> None:
        self.budget = context_tokens
        self.nodes: list[Node] = []
        self.renders: dict[int, str] = {}
        self.running = hashlib.sha256()

    def render(self, node: Node) -> str:
        return self.renders[node.id]

    def append(self, node: Node) -> None:
        text = blocks.render_block(node)
        self.renders[node.id] = text
        self.nodes.append(node)
        self.running.update(text.encode("utf-8"))

    def prompt_hash(self, node: Node) -> str:
        """The prompt hash of `node`, the next block, setting the ticks its prompt
        collapses (as the runtime would have, with three characters a token) in its meta."""
        header = blocks.forced_header(node)
        if self.budget <= 0 or not self.nodes:
            node.meta["collapsed"] = []
            digest = self.running.copy()
            digest.update(header.encode("utf-8"))
            return digest.hexdigest()
        fitted = blocks.fit_context(self.nodes, self.budget, _estimate_tokens, render=self.render)
        node.meta["collapsed"] = fitted.collapsed
        return blocks.prompt_hash(fitted.text + header)


def _estimate_tokens(text: str) -> int:
    return len(text) // 3 + 1


def _update(store: TraceStore, node: Node, block: dict[str, Any], digest: str) -> Node:
    """Take the fields a later dump of the same run added to an imported block."""
    changes: dict[str, Any] = {blocks.WEAVE_META: _weave_meta(block, digest)}
    outcome = block.get("outcome")
    status = None
    if isinstance(outcome, Mapping) and "ok" not in node.meta:
        changes["ok"] = not outcome.get("error")
        status = _status_of(node.kind, outcome)
    updated = store.update_node(node.id, status=status, meta=changes)
    if not store.evaluations(node.id):
        _record_outcomes(store, updated, block)
    return updated


def _evaluation_rows(block: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """An outcome block's evaluation results: its table after the first row (the
    action's own result)."""
    rows = []
    for row in list(block.get("table") or ())[1:]:
        if isinstance(row, list | tuple) and len(row) == 2:
            rows.append((str(row[0]), row[1]))
    return rows


def _passed(row: tuple[str, Any]) -> bool:
    result = row[1]
    return result != ERROR_RESULT and bool(result)


def _record_outcomes(store: TraceStore, node: Node, block: Mapping[str, Any]) -> None:
    outcome = block.get("outcome")
    if isinstance(outcome, Mapping):
        error = outcome.get("error")
        store.record_evaluation(
            node.id,
            RUN_EVALUATION,
            kind=EvaluationKind.CALLBACK,
            result=_encode_json(outcome.get("result")),
            passed=not error,
            error=str(error) if error else None,
        )
    if block.get("type") == blocks.OUTCOME:
        for name, result in _evaluation_rows(block):
            store.record_evaluation(
                node.id,
                name,
                kind=EvaluationKind.CALLBACK,
                result=None if result == ERROR_RESULT else _encode_json(result),
                passed=_passed((name, result)),
                error="raised an exception" if result == ERROR_RESULT else None,
            )


def _add_alternates(
    store: TraceStore, session_id: int, node: Node, block: Mapping[str, Any]
) -> None:
    """weave-agent's `candidates` (the other programs sampled for the block, with their
    scores) as alternate siblings, under the same header as the chosen one."""
    candidates = block.get("candidates")
    if not isinstance(candidates, list) or node.author is not Author.MODEL:
        return
    alternates = []
    for number, candidate in enumerate(candidates):
        if isinstance(candidate, list | tuple) and len(candidate) == 2:
            program, score = candidate
        elif isinstance(candidate, Mapping):
            program, score = blocks.weave_body(candidate), candidate.get("score")
        else:
            program, score = candidate, None
        if not isinstance(program, str):
            continue
        sibling = {k: v for k, v in block.items() if k not in _CHOSEN_ONLY}
        sibling.pop(blocks.EXTENSION_KEY, None)
        body_key = "body" if "body" in block else blocks.LEGACY_BODY_KEYS.get(node.kind, "body")
        sibling[body_key] = program
        if "score" in sibling:
            sibling["score"] = score
        meta = _weave_meta(sibling, blocks.block_hash(sibling))
        meta["candidate"] = number
        new_meta = {blocks.WEAVE_META: meta, "collapsed": node.meta.get("collapsed", [])}
        for key in ("index", "timestamp", "q"):
            if key in node.meta:
                new_meta[key] = node.meta[key]
        value = _finite(score)
        alternates.append(
            NewNode(
                kind=node.kind,
                text=program,
                tick=node.tick,
                parent_id=node.parent_id,
                author=Author.MODEL,
                status=NodeStatus.ALTERNATE,
                score=value,
                score_parts={"evaluator": value} if value is not None and "q" in node.meta else {},
                prompt_hash=node.prompt_hash,
                meta=new_meta,
            )
        )
    if alternates:
        store.add_nodes(session_id, alternates)


def _encode_json(value: Any) -> Any:
    """`value` with every non-finite float as {"$float": "inf"}: an evaluation's result
    goes into a JSON column, and PostgreSQL's JSON has no NaN or Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"$float": repr(value)}
    if isinstance(value, Mapping):
        return {str(k): _encode_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode_json(v) for v in value]
    return value


# -- exporting -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Exported:
    trace: Path
    rendered: Path
    blocks: int


def chosen_path(store: TraceStore, session_id: int) -> list[Node]:
    """The session's line of work: the path to its latest block that is not an alternate
    (where a resumed session goes on from)."""
    live = [n for n in store.tree(session_id) if n.status is not NodeStatus.ALTERNATE]
    return store.path(live[-1].id) if live else []


def weave_blocks(
    store: TraceStore, session_id: int, *, alternates: bool = False
) -> list[dict[str, Any]]:
    """The session's chosen path as weave-agent's block dicts; with `alternates`, each
    model-written block of ours lists its alternates as weave-agent's `candidates`."""
    path = chosen_path(store, session_id)
    out = []
    siblings: dict[int | None, list[Node]] = {}
    if alternates:
        for node in store.tree(session_id):
            if node.status is NodeStatus.ALTERNATE:
                siblings.setdefault(node.parent_id, []).append(node)
    for node in path:
        block = blocks.to_weave(node)
        others = [n for n in siblings.get(node.parent_id, []) if n.kind == node.kind]
        if others and "candidates" not in block and blocks.WEAVE_META not in node.meta:
            block["candidates"] = [[n.text.rstrip("\n"), n.score] for n in others]
        out.append(block)
    return out


def export_session(
    store: TraceStore, session_id: int, out_dir: str | Path, *, alternates: bool = False
) -> Exported:
    """Write the session as weave-agent does: `event_trace_<time>.json` (the block dicts)
    and `rendered_trace_<time>.py` (their rendering), named by its last block's time."""
    trace = weave_blocks(store, session_id, alternates=alternates)
    if not trace:
        raise ValueError(f"session {session_id} has no blocks")
    stamp = _finite(trace[-1].get("timestamp"))
    if stamp is None:
        stamp = store.get_session(session_id).updated_at
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    trace_path = folder / f"event_trace_{round(stamp)}.json"
    rendered_path = folder / f"rendered_trace_{round(stamp)}.py"
    trace_path.write_text(json.dumps(trace), encoding="utf-8")
    rendered_path.write_text("".join(blocks.render_weave(b) for b in trace), encoding="utf-8")
    return Exported(trace_path, rendered_path, len(trace))
