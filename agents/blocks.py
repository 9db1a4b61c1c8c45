"""Blocks and their rendering: the trace as one text document, as weave-agent writes it.

A block is rendered as a header the runtime writes (a forced prefix when the model writes
the block), the body, an optional `#q:` line with the evaluator's verdict, and
`#endblock`::

    #startblock type: action
    #index 17
    #timestamp 1740912854.13
    #tick 4

    def action_check_key(subagent):
        ...
    self.add_action("Check the candidate key", action_check_key)
    #q: Is this action likely to make progress on the task? Yes. (81.2%)
    #endblock

Rendering is a pure function of the stored nodes: the `#q:` line prints the stored
log-odds (weave-agent re-samples it on every render), and the header's index and
timestamp are stored in the node's metadata when the block starts. The same tree
therefore renders to the same bytes, which is what lets training re-create the exact
prompt a block was written after (`prompt_hash`).

Over the context budget the oldest ticks collapse to one line each; which ticks were
collapsed is stored with every model-written block, so the prompt can be re-rendered
without the tokenizer.
"""

from __future__ import annotations

import ast
import hashlib
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

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

MODEL_KINDS = frozenset(
    {ORIENTATION, ACTION, BACKTRACK, DEBUG, EXPECTATION, OBSERVATION_INFERENCE, EVALUATION}
)
RUNTIME_KINDS = frozenset({GENESIS, TASK_REMINDER, OBSERVATION, ERROR, OPTION, OUTCOME})
BLOCK_KINDS = MODEL_KINDS | RUNTIME_KINDS
#: Blocks whose body is Python that runs in the sandbox.
CODE_KINDS = frozenset({ACTION, OBSERVATION_INFERENCE, EVALUATION})

END_MARKER = "#endblock"
#: Generation stops at any of these: the block's end, a new block, or a `#q:` line the
#: model tries to write for itself.
STOP = (END_MARKER, "#startblock", "\n#q:")

ERROR_WARNING = "# WARNING: Error means last callback was not fully executed"


@dataclass(frozen=True, slots=True)
class Header:
    kind: str
    index: int
    tick: int
    timestamp: float
    title: str | None = None

    def text(self) -> str:
        """The header lines and the blank line the body starts after."""
        lines = [
            f"#startblock type: {self.kind}",
            f"#index {self.index}",
            f"#timestamp {self.timestamp:.2f}",
            f"#tick {self.tick}",
        ]
        if self.title is not None:
            lines.append(f"#title {one_line(self.title)}")
        if self.kind == ERROR:
            lines.append(ERROR_WARNING)
        return "\n".join(lines) + "\n\n"

    def meta(self) -> dict[str, object]:
        """What a node stores so its header renders again byte for byte."""
        meta: dict[str, object] = {"index": self.index, "timestamp": round(self.timestamp, 2)}
        if self.title is not None:
            meta["title"] = self.title
        return meta


def header_of(node: Node) -> Header:
    meta = node.meta
    return Header(
        kind=node.kind,
        index=int(meta.get("index", 0)),
        tick=node.tick,
        timestamp=float(meta.get("timestamp", 0.0)),
        title=meta.get("title"),
    )


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
    return "".join(f"# {line}".rstrip() + "\n" for line in text.split("\n"))


def render_block(node: Node) -> str:
    """One stored block as the model sees it in its context."""
    question = node.meta.get("q")
    log_odds = node.score_parts.get("evaluator")
    if node.kind == OPTION:
        return q_line(str(question), float(log_odds if log_odds is not None else 0.0)) + "\n"
    header = header_of(node).text()
    body = comment_lines(node.text) if node.kind == OBSERVATION else node.text.rstrip("\n") + "\n"
    footer = ""
    if question and log_odds is not None:
        footer = q_line(str(question), float(log_odds)) + "\n"
    return header + body + footer + END_MARKER + "\n"


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


def render_context(path: Sequence[Node], collapsed: Iterable[int] = ()) -> str:
    """The whole context before the next block: every block of the path in order, and
    one summary line for each tick in `collapsed`. Deterministic: the same nodes and the
    same collapsed ticks give the same bytes."""
    folded = set(collapsed)
    out = []
    for tick, nodes in group_ticks(path):
        if tick in folded:
            out.append(tick_summary(tick, nodes))
        else:
            out.extend(render_block(node) for node in nodes)
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
    sizes = {tick: sum(count_tokens(render_block(n)) for n in nodes) for tick, nodes in groups}
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
    text = render_context(path, collapsed)
    if total <= budget - slack:
        return Fitted(text, collapsed, total)
    return Fitted(text, collapsed, count_tokens(text))


def block_prompt(parent_path: Sequence[Node], node: Node) -> str:
    """The exact text a model-written block was generated after: the context up to its
    parent (with the ticks that were collapsed then) and its forced header. The header is
    rendered without the title the block later registers: no title was known when the
    model began writing (`render_block` shows it, for the blocks that follow)."""
    header = header_of(node)
    forced = Header(header.kind, header.index, header.tick, header.timestamp)
    return render_context(parent_path, node.meta.get("collapsed", ())) + forced.text()


def block_completion(node: Node) -> str:
    """What the model wrote for a block, as training data: the body and the end marker
    it stopped at (the `#q:` line is the runtime's, not the model's)."""
    return node.text.rstrip("\n") + "\n" + END_MARKER


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
    return None


def registered_titles(code: str, method: str) -> list[str]:
    """Literal titles passed to `self.<method>(title, ...)` in `code` (for summaries and
    lints; what the kernel actually registers is what counts at run time)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
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


def outcome_table(rows: Sequence[tuple[str, str]]) -> str:
    """The outcome block's body: each program (action or evaluation) and its result."""
    lines = ["Evaluation Results:", "--------------------"]
    for program, result in rows:
        lines += [f"Program: {program}", f"Result: {result}", "--------------------"]
    return "\n".join(lines)
