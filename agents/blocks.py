"""Blocks and their rendering: the trace as one text document, as weave-agent writes it.

A block is rendered exactly as weave-agent's `render_block.py` renders its event-trace
dicts: the header the runtime writes (a forced prefix when the model writes the block),
a blank line, the body, an optional `#q:` line with the evaluator's verdict, and
`#endblock`::

    #startblock type: action
    #index 17
    #timestamp 1740912854.13

    def action_check_key(subagent):
        ...
    self.add_action("Check the candidate key", action_check_key)
    #q: Is this action likely to make progress on the task? Yes. (81.2%)
    #endblock

Every node is first turned into weave-agent's block dict (`to_weave`: a block imported
from weave-agent gives back the dict it came from, field for field), and the dict is
rendered (`render_weave`). So our context, our export and weave-agent's renderer agree,
except on the `#q:` lines, where we differ on purpose: the evaluator's line prints the
stored log-odds deterministically (weave-agent draws the Yes/No answer at random on every
render), and the "did it run without errors" line weave-agent adds once a block's code
has run is left out (it changes a block after later blocks were written after it). The
same tree therefore renders to the same bytes, which is what lets training re-create the
exact prompt a block was written after (`prompt_hash`).

Over the context budget the oldest ticks collapse to one line each; which ticks were
collapsed is stored with every model-written block, so the prompt can be re-rendered
without the tokenizer.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, NamedTuple

from agents import example as worked_example

if TYPE_CHECKING:
    from storage import Node

# Tick order (M: the model writes it, R: the runtime):
#   task-reminder (R), observation (R, one per view and per operator message),
#   orientation (M), action (M), expectation (M), then either the action runs or
#   error (R) / debug (M) / action (M) again, up to three attempts (a rejected action gets
#   an `observation` with the operator's reason instead of an error), option (R),
#   observation-inference (M, only when the option says so), evaluation (M), outcome (R).
# Tick 0 is one `genesis` block (R): the task, the work directory and the block API.
GENESIS = "genesis"
TASK_REMINDER = "task-reminder"
OBSERVATION = "observation"
ORIENTATION = "orientation"
ACTION = "action"
BACKTRACK = "backtrack"
ERROR = "error"
DEBUG = "debug"
EXPECTATION = "expectation"
OPTION = "option"
OBSERVATION_INFERENCE = "observation-inference"
EVALUATION = "evaluation"
OUTCOME = "outcome"
# Kinds only weave-agent writes (they arrive in imported traces).
BOOTSTRAP = "bootstrap"
TASK_INFERENCE = "task-inference"

MODEL_KINDS = frozenset(
    {ORIENTATION, ACTION, BACKTRACK, DEBUG, EXPECTATION, OBSERVATION_INFERENCE, EVALUATION}
)
RUNTIME_KINDS = frozenset({GENESIS, TASK_REMINDER, OBSERVATION, ERROR, OPTION, OUTCOME})
BLOCK_KINDS = MODEL_KINDS | RUNTIME_KINDS
#: Blocks whose body is Python that runs in the sandbox.
CODE_KINDS = frozenset({ACTION, OBSERVATION_INFERENCE, EVALUATION})

#: The yes/no question the logit evaluator asks of each kind of block (`agents.ranking`),
#: printed with its answer as the block's `#q:` line.
QUESTIONS = {
    ORIENTATION: "Does this orientation reason well about what to do next?",
    ACTION: "Is this action likely to make progress on the task?",
    BACKTRACK: "Does this backtrack block find a better way forward?",
    DEBUG: "Does this debug block find the cause of the error?",
    EXPECTATION: "Does this expectation say clearly how success and failure would look?",
    OBSERVATION_INFERENCE: "Do these observation views help with the task?",
    EVALUATION: "Do these evaluations check whether the action worked?",
}
OPTION_QUESTION = "Do the observation views need to change before the next tick?"
OUTCOME_QUESTION = "Does this outcome match the expectation?"

END_MARKER = "#endblock"
#: Generation stops at any of these: the block's end, a new block, or a `#q:` line the
#: model tries to write for itself.
STOP = (END_MARKER, "#startblock", "\n#q:")

ERROR_WARNING = "# WARNING: Error means last callback was not fully executed"

#: Where weave-agent's older traces kept a block's text, by block type, before `body`.
LEGACY_BODY_KEYS: Mapping[str, str] = {
    GENESIS: "program",
    BOOTSTRAP: "program",
    OBSERVATION: "content",
    ORIENTATION: "program",
    TASK_INFERENCE: "program",
    ACTION: "program",
    EXPECTATION: "program",
    OBSERVATION_INFERENCE: "program",
    EVALUATION: "program",
    TASK_REMINDER: "task",
    ERROR: "message",
}

#: weave-agent's `#block_size` header: the token budget its model was told it had.
BLOCK_SIZES: Mapping[str, int] = {"full": 768, "half": 384, "quarter": 192}

#: Kinds weave-agent renders as header, body and footer (others: the dict's repr).
_PLAIN_KINDS = frozenset(
    {
        GENESIS,
        ACTION,
        EXPECTATION,
        OBSERVATION_INFERENCE,
        EVALUATION,
        DEBUG,
        BACKTRACK,
        ORIENTATION,
        TASK_INFERENCE,
        TASK_REMINDER,
        ERROR,
        BOOTSTRAP,
    }
)

#: The block dict's key for what we keep and weave-agent has no field for (the tick, who
#: wrote the block, its status, the parts of its score); weave-agent ignores it.
EXTENSION_KEY = "agent_console"
#: The node metadata key under which a block imported from weave-agent keeps its dict.
WEAVE_META = "weave"


@dataclass(frozen=True, slots=True)
class Header:
    kind: str
    index: int
    tick: int
    timestamp: float
    title: str | None = None

    def weave(self) -> dict[str, Any]:
        block: dict[str, Any] = {
            "type": self.kind,
            "index": self.index,
            "timestamp": round(self.timestamp, 2),
        }
        if self.kind == OBSERVATION:
            block["title"] = self.title or ""
        return block

    def text(self) -> str:
        """The header lines and the blank line the body starts after."""
        return render_header(self.weave()) + "\n"

    def meta(self) -> dict[str, object]:
        """What a node stores so its header renders again byte for byte."""
        meta: dict[str, object] = {"index": self.index, "timestamp": round(self.timestamp, 2)}
        if self.title is not None:
            meta["title"] = self.title
        return meta


def one_line(text: str) -> str:
    return " ".join(text.split())


def q_line(question: str, log_odds: float) -> str:
    """The evaluator's verdict as weave-agent prints it, but deterministic: the likelier
    answer with its probability, instead of a fresh random draw on every render."""
    if math.isnan(log_odds):
        log_odds = 0.0
    p_yes = 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, log_odds))))
    answer, p = ("Yes.", p_yes) if log_odds >= 0 else ("No.", 1.0 - p_yes)
    return f"#q: {question} {answer} ({p * 100:.1f}%)"


def comment_lines(text: str) -> str:
    """A runtime-written body as `# ` comment lines (observations are shown this way)."""
    return "".join(f"# {line}\n" for line in text.split("\n"))


# -- weave-agent's block dicts -------------------------------------------------------------


def weave_body(block: Mapping[str, Any]) -> Any:
    """A block dict's text, wherever its trace's vintage kept it (None when it has none)."""
    if "body" in block:
        return block["body"]
    legacy = LEGACY_BODY_KEYS.get(str(block.get("type")))
    return block.get(legacy) if legacy is not None else None


def render_header(block: Mapping[str, Any]) -> str:
    """weave-agent's header lines for a block dict, each ending in a newline."""
    kind = block.get("type")
    lines = []
    if "subagent" in block:
        lines.append(f"#subagent {block['subagent']}\n")
    lines.append(f"#startblock type: {kind}\n")
    for key, label in (("index", "#index"), ("timestamp", "#timestamp")):
        if key in block:
            lines.append(f"{label} {block[key]}\n")
    if "time_remaining" in block:
        lines.append(f"#time_remaining {block['time_remaining']} seconds\n")
    if "block_size" in block:
        size = block["block_size"]
        if size in BLOCK_SIZES:
            lines.append(f"#block_size I have {BLOCK_SIZES[size]} tokens ({size}) to write with\n")
        else:  # weave-agent writes this line without its newline
            lines.append("#block_size [INVALID BLOCKSIZE GIVEN] (How did that happen?)")
    if "bm25_query" in block:
        lines.append(f"#bm25_query {block['bm25_query']}\n")
    meta = block.get("metadata")
    if kind == OBSERVATION:
        lines.append(f"#title {block.get('title', '')}\n")
    elif kind == ORIENTATION and isinstance(meta, Mapping):
        lines.append(f"# Starting new tick with block #{meta.get('block_index')}\n")
        lines.append(f"# Current Working Directory: {meta.get('working_directory')}\n")
    elif kind == TASK_INFERENCE and isinstance(meta, Mapping):
        lines.append(f"# Current Task: ({meta.get('task_id')}) {meta.get('task_title')}\n")
        lines.append(f"# Task Status: ({meta.get('task_status')}) {meta.get('task_explanation')}\n")
    elif kind == ERROR:
        lines.append(ERROR_WARNING + "\n")
    return "".join(lines)


def _score(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def render_weave(block: Mapping[str, Any]) -> str:
    """One block dict rendered as weave-agent's `render_block` renders it, except for the
    `#q:` lines: the evaluator's is deterministic (`q_line`), and the one weave-agent adds
    to a block that ran ("Will this callback run successfully? Yes.", a phrasing drawn at
    random) is left out, because it would change a block's rendering after the blocks
    that follow it were written, and their prompts must stay what they were."""
    kind = block.get("type")
    if kind == OPTION:
        return q_line(str(block.get("q", "")), _score(block.get("score"))) + "\n"
    footer = ""
    if "score" in block and block.get("q"):
        footer += "\n" + q_line(str(block["q"]), _score(block["score"]))
    tags = block.get("tags")
    if tags is not None:
        words = tags if isinstance(tags, list | tuple) else [tags]
        footer += "\n#tags: " + " ".join(str(tag) for tag in words)
    footer += "\n" + END_MARKER + "\n"
    header = render_header(block)
    body = weave_body(block)
    if kind == OBSERVATION:
        text = body if isinstance(body, str) else repr(body)
        return header + "\n" + comment_lines(text) + footer
    if kind == OUTCOME:
        return header + "\n" + outcome_table(block.get("table") or ()) + footer
    if kind in _PLAIN_KINDS:
        text = body if isinstance(body, str) else repr(body)
        if kind == BOOTSTRAP:
            footer += (
                "# END OF DEMO. Starting on the next tick you have\n# full control. Wake up.\n"
            )
        return header + "\n" + text + footer
    return header + repr(dict(block)) + footer


def block_hash(block: Mapping[str, Any]) -> str:
    """A block dict's identity: the hash of its canonical JSON."""
    canonical = json.dumps(block, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def to_weave(node: Node) -> dict[str, Any]:
    """The node as weave-agent's block dict.

    A block imported from weave-agent gives back the dict it came from (its fields, in
    their order, its body under the key its trace used). Our own blocks give
    weave-agent's fields they have (type, body, index, timestamp, title, q, score, an
    `outcome` once code ran, an outcome block's `table`) and, under `EXTENSION_KEY`, what
    weave-agent has no field for.
    """
    imported = node.meta.get(WEAVE_META)
    if isinstance(imported, Mapping) and isinstance(imported.get("block"), str):
        given: dict[str, Any] = json.loads(imported["block"])
        if imported.get("body_key"):
            given[imported["body_key"]] = node.text
        return given
    meta = node.meta
    block: dict[str, Any] = {"type": node.kind}
    if node.kind != OUTCOME:
        block["body"] = node.text.rstrip("\n")
    for key in ("index", "timestamp"):
        if key in meta:
            block[key] = meta[key]
    if node.kind == OBSERVATION:
        block["title"] = meta.get("title") or ""
    log_odds = node.score_parts.get("evaluator")
    if meta.get("q") and log_odds is not None:
        block["q"] = meta["q"]
        block["score"] = log_odds
    if node.kind in CODE_KINDS and "ok" in meta:
        block["outcome"] = {
            "id": meta.get("index"),
            "body": block["body"],
            "error": None if meta["ok"] else (meta.get("error") or "failed"),
            "result": meta.get("result"),
        }
    if node.kind == OUTCOME:
        table = meta.get("table")
        block["table"] = table if isinstance(table, list) else parse_outcome_table(node.text)
    extension: dict[str, Any] = {
        "tick": node.tick,
        "author": node.author.value,
        "status": node.status.value,
    }
    if node.score is not None:
        extension["score"] = node.score
    if node.score_parts:
        extension["score_parts"] = dict(node.score_parts)
    if node.truncated:
        extension["truncated"] = True
    if node.kind != OBSERVATION and meta.get("title"):
        extension["title"] = meta["title"]
    block[EXTENSION_KEY] = extension
    return block


#: The genesis block's text: the task, the block API and the work directory.
GENESIS_TEMPLATE = '''\
"""agent-console session: {title}

The task:
{prompt}

You work in ticks of blocks. The runtime writes each block's header; you write its body
and end it with #endblock. In a code block, `self` is the agent:
    self.add_action(title, fn)           the action to run this tick; fn(subagent)
    self.add_evaluation(title, fn)       a check run after the action; returns bool or number
    self.add_observation_view(title, fn) shown at the start of every tick
    self.remove_observation_view(title)
    subagent.read_file(path), subagent.write_file(path, text), subagent.list_files(path)
    subagent.run(command, timeout=10) -> dict(returncode, stdout, stderr)
    subagent.tell_operator(text)         say something to the operator
    subagent.finish(message)             the task is done
The work directory is {workdir}; it holds: {files}.
The task is checked by: {checks}.
"""'''


#: The genesis of a session whose code blocks are scripts (`agents.forms`).
GENESIS_SCRIPT_TEMPLATE = '''\
"""agent-console session: {title}

The task:
{prompt}

You work in ticks of blocks; the runtime writes each block's header and runs your code in
a sandbox. An action block is a complete Python program run in the work directory
(what it prints is its result). An evaluation block is a Python script that exits with status 0 when the
work is right. Start a script with a `#` comment naming what it does.
The work directory is {workdir}; it holds: {files}.
The task is checked by: {checks}.
"""'''


#: The node metadata key for how many characters of its body a block shows in the
#: context (the runtime sets it on an operator's edit too long for a context; the store
#: keeps the whole text, which is what ran). Stored, so re-rendering needs no rule.
CONTEXT_CHARS_META = "context_chars"
#: The node metadata key for whether an action candidate, tried on a copy of the work dir,
#: passed the task's checks (`RunOptions.choose_by_checks`: improve's rollouts only).
CHECKS_META = "passes_checks"


def clip_body(text: str, limit: int) -> str:
    """`text` cut to `limit` characters for the context: its head and tail, a marker
    between them."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    return f"{text[:head]}\n# [... {len(text) - limit} characters cut ...]\n{text[head - limit :]}"


def head_within(text: str, limit: int, count: Callable[[str], int]) -> str:
    """The longest head of `text` that `count` makes at most `limit` tokens (a token
    covers at least one byte, so a text of `limit` bytes or fewer is whole)."""
    if len(text.encode("utf-8")) <= limit or count(text) <= limit:
        return text
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if count(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low]


def _example_block(index: int, kind: str, body: str, **fields: object) -> str:
    block: dict[str, object] = {"type": kind}
    if kind != OUTCOME:
        block["body"] = body
    block.update(index=index, timestamp=worked_example.EPOCH + 7 * index, **fields)
    return render_weave(block)


@cache
def example_text(version: int = worked_example.CURRENT) -> str:
    """The worked example (`agents.example`), rendered as a session's blocks are: one fixed
    text per version."""
    if version != 1:
        raise ValueError(f"no example version {version}")
    ex = worked_example
    genesis = GENESIS_TEMPLATE.format(
        title=ex.TITLE,
        prompt=ex.PROMPT,
        workdir="/workspace",
        files="notes.txt",
        checks="count_is_right",
    )
    rows = [
        ["action: Write the word count of notes.txt to count.txt", "12"],
        ["count_is_right", "True"],
        ["count.txt holds a number", "True"],
    ]
    block = _example_block
    parts = [
        block(0, GENESIS, genesis),
        block(1, TASK_REMINDER, f"Task: {ex.TITLE}\n{ex.PROMPT}"),
        block(2, OBSERVATION, "['notes.txt']", title="Files"),
        block(3, ORIENTATION, ex.ORIENTATION, q=QUESTIONS[ORIENTATION], score=2.2),
        block(4, ACTION, ex.ACTION, q=QUESTIONS[ACTION], score=2.9),
        block(5, EXPECTATION, ex.EXPECTATION, q=QUESTIONS[EXPECTATION], score=1.7),
        render_weave({"type": OPTION, "q": OPTION_QUESTION, "score": -1.3}),
        block(7, EVALUATION, ex.EVALUATION, q=QUESTIONS[EVALUATION], score=1.9),
        block(8, OUTCOME, "", table=rows, q=OUTCOME_QUESTION, score=2.4),
    ]
    return ex.START + "".join(parts) + ex.END


def render_block(node: Node) -> str:
    """One stored block as the model sees it in its context (a body longer than its
    `CONTEXT_CHARS_META` cut to that; a genesis block with the worked example it was
    shown after, `agents.example`)."""
    block = to_weave(node)
    example = ""
    if node.kind == GENESIS and isinstance(node.meta.get(worked_example.EXAMPLE_META), int):
        example = example_text(node.meta[worked_example.EXAMPLE_META])
    limit = node.meta.get(CONTEXT_CHARS_META)
    body = block.get("body")
    if isinstance(limit, int) and isinstance(body, str) and len(body) > limit:
        block["body"] = clip_body(body, limit)
    return example + render_weave(block)


def tick_summary(tick: int, nodes: Sequence[Node]) -> str:
    """One line standing for a whole collapsed tick."""
    parts = []
    for node in nodes:
        if node.kind == ACTION and node.meta.get("title"):
            verdict = node.status.value
            parts.append(f"action {node.meta['title']!r} ({verdict})")
        elif node.kind == OUTCOME and "passed" in node.meta:
            parts.append(f"{node.meta['passed']}/{node.meta.get('total', 0)} evaluations passed")
        elif node.kind == ERROR:
            parts.append("an error")
    summary = "; ".join(parts) if parts else f"{len(nodes)} blocks"
    return f"#tick {tick} (collapsed): {summary}\n"


def group_ticks(path: Iterable[Node]) -> list[tuple[int, list[Node]]]:
    """Consecutive nodes of the path grouped by tick, in order."""
    groups: list[tuple[int, list[Node]]] = []
    for node in path:
        if groups and groups[-1][0] == node.tick:
            groups[-1][1].append(node)
        else:
            groups.append((node.tick, [node]))
    return groups


def render_context(
    path: Sequence[Node],
    collapsed: Iterable[int] = (),
    render: Callable[[Node], str] = render_block,
) -> str:
    """The whole context before the next block: every block of the path in order, and
    one summary line for each tick in `collapsed`. Deterministic: the same nodes and the
    same collapsed ticks give the same bytes."""
    folded = set(collapsed)
    out = []
    for tick, nodes in group_ticks(path):
        if tick in folded:
            out.append(tick_summary(tick, nodes))
        else:
            out.extend(render(node) for node in nodes)
    return "".join(out)


class Fitted(NamedTuple):
    text: str
    collapsed: list[int]
    #: the text's size: the sum of its ticks' counts, or its exact count when that sum
    #: came close to the budget
    tokens: int


def fit_context(
    path: Sequence[Node],
    budget: int,
    count_tokens: Callable[[str], int],
    *,
    keep_recent: int = 1,
    render: Callable[[Node], str] = render_block,
) -> Fitted:
    """The context within `budget` tokens, and the ticks collapsed to get there.

    Tick 0 (the task) and the last `keep_recent` ticks are never collapsed; the others
    go oldest first, so recent ticks stay whole as long as they fit. The result may
    still be over budget when what can't be collapsed is (then `tokens > budget`).

    Tokens are counted per block, so a caller that caches `count_tokens` counts each
    block once. Blocks end on a newline, where BPE merges one token at most across the
    boundary, so the sum plus one token per block bounds the text's count. Only when
    nothing is left to collapse and that bound is still over budget is the whole text
    counted: whether it fits decides whether the session can go on.
    """
    groups = group_ticks(path)
    ticks = [tick for tick, _ in groups]
    recent = set(ticks[-keep_recent:]) if keep_recent else set()
    foldable = [t for t in ticks if t != 0 and t not in recent]
    sizes = {tick: sum(count_tokens(render(n)) for n in nodes) for tick, nodes in groups}
    summaries = {
        tick: count_tokens(tick_summary(tick, nodes)) for tick, nodes in groups if tick in foldable
    }
    slack = len(path)
    total = sum(sizes.values())
    collapsed: list[int] = []
    for tick in foldable:
        if total <= budget - slack:
            break
        total -= sizes[tick] - summaries[tick]
        collapsed.append(tick)
    text = render_context(path, collapsed, render)
    if total <= budget - slack:
        return Fitted(text, collapsed, total)
    return Fitted(text, collapsed, count_tokens(text))


def block_prompt(
    parent_path: Sequence[Node], node: Node, render: Callable[[Node], str] = render_block
) -> str:
    """The exact text a model-written block was generated after: the context up to its
    parent (with the ticks that were collapsed then) and its forced header. `render` may
    be a cache of `render_block`."""
    return render_context(parent_path, node.meta.get("collapsed", ()), render) + forced_header(node)


def forced_header(node: Node) -> str:
    """The header the runtime wrote before the model began the block."""
    return render_header(to_weave(node)) + "\n"


def block_completion(node: Node) -> str:
    """What the model wrote for a block, as training data: the body as the context shows
    it and the end marker it stopped at (the `#q:` line is the runtime's, not the
    model's)."""
    body = weave_body(to_weave(node))
    return (body if isinstance(body, str) else repr(body)) + "\n" + END_MARKER


def prompt_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_error(code: str) -> str | None:
    """None when `code` parses as Python, else the error in one line."""
    try:
        ast.parse(code)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}" if exc.lineno else exc.msg
    except ValueError as exc:  # e.g. null bytes
        return one_line(str(exc))
    except (RecursionError, MemoryError):
        return "nested too deeply to parse"
    return None


def registered_titles(code: str, method: str) -> list[str]:
    """Literal titles passed to `self.<method>(title, ...)` in `code` (for summaries and
    lints; what the kernel actually registers is what counts at run time)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    titles = []
    for call in ast.walk(tree):
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == method
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            titles.append(call.args[0].value)
    return titles


def outcome_table(rows: Iterable[Any]) -> str:
    """The outcome block's body as weave-agent writes it: each program (the action, then
    each evaluation) and its result."""
    text = "Evaluation Results:\n--------------------\n"
    for row in rows:
        program, result = _row(row)
        text += f"Program: {program}\nResult: {result}\n--------------------\n"
    return text


def _row(row: Any) -> tuple[Any, Any]:
    if isinstance(row, list | tuple) and len(row) == 2:
        return row[0], row[1]
    return row, None


def parse_outcome_table(text: str) -> list[list[str]]:
    """The rows of an `outcome_table` text (for blocks stored before the rows were)."""
    rows: list[list[str]] = []
    for chunk in text.split("--------------------\n")[1:]:
        if not chunk.startswith("Program: ") or "\nResult: " not in chunk:
            continue
        program, _, result = chunk[len("Program: ") :].partition("\nResult: ")
        rows.append([program, result.removesuffix("\n").removesuffix("\n--------------------")])
    return rows
