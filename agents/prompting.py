"""How the trace is put to the model: the raw document, or the model's chat template.

The weave trace is what is stored, shown, labelled and trained on, whatever the model.
A base model continues the document itself (`document`): the prompt is the context and
the forced header, and the yes/no questions follow the block as `#q:` lines. An
instruction-tuned model is asked (`chat`): the system turn says what it is and holds the
genesis; every block the model wrote is its reply to a user turn holding what the runtime
reported since (observations, errors, outcomes) and what the block is for; the next block
is asked for the same way (a code block's reply begun in a Python fence), and a question
is a user turn after the reply. Both are rebuilt from the stored path, so a prompt
re-renders for training exactly (`prompt_hash` is always the document's).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents import blocks, forms, ranking

if TYPE_CHECKING:
    from storage import Node

DOCUMENT = "document"
CHAT = "chat"
STYLES = (DOCUMENT, CHAT)

SYSTEM = (
    "You are a careful Python programmer working as an agent on the task below, in a "
    "sandboxed work directory. The user reports what the runtime did and asks for one "
    "block at a time: write that block and nothing else. Results come only from the "
    "runtime: never write what a program printed or whether a check passed."
)

#: What each block is for, as the model is asked for it, by form.
_ASK = {
    blocks.ORIENTATION: (
        "In one or two sentences, say what you will do next and which files you will read "
        "and write."
    ),
    blocks.EXPECTATION: (
        "Write the expectation: in one or two sentences, how you will know whether the "
        "action worked."
    ),
    blocks.DEBUG: "Write the debug block: in one to three sentences, why the action failed.",
    blocks.BACKTRACK: (
        "Write the backtrack block: in one to three sentences, why this approach is not "
        "working and what to try instead."
    ),
}
_ASK_CODE = {
    forms.CALLBACK: {
        blocks.ACTION: (
            "Write the action: Python that defines a function of `subagent` doing this "
            "tick's step and registers it with `self.add_action(title, function)`."
        ),
        blocks.EVALUATION: (
            "Write the evaluation: Python that defines a function of `subagent` returning "
            "True when the task is done and registers it with "
            "`self.add_evaluation(title, function)`."
        ),
        blocks.OBSERVATION_INFERENCE: (
            "Write the observation-inference block: Python that adds or removes "
            "observation views (self.add_observation_view, self.remove_observation_view)."
        ),
    },
    forms.SCRIPT: {
        blocks.ACTION: (
            "Write the action: a complete Python program that does the task, reading and "
            "writing the files with open()."
        ),
        blocks.EVALUATION: (
            "Write the evaluation: a short Python script, run with no input, that checks "
            "what the action did without doing it again (import or read what it wrote) and "
            "fails with an assert unless the task is done."
        ),
        blocks.OBSERVATION_INFERENCE: (
            "Write the observation-inference block: Python that adds or removes "
            "observation views (self.add_observation_view, self.remove_observation_view)."
        ),
    },
}


def ask(kind: str, form: str) -> str:
    """What the user turn asks for: the next block's kind and what it is for."""
    text = _ASK_CODE.get(form, _ASK_CODE[forms.CALLBACK]).get(kind) or _ASK.get(kind)
    return text or f"Write the {kind} block."


_HEADER_LINE = re.compile(r"^\s*#(startblock|endblock|index|timestamp|tick|block_size|q:)\b")
_FENCE_LINE = re.compile(r"^\s*```[\w+-]*\s*$")


def clean(kind: str, text: str) -> str:
    """A chat model's reply as a block's body: the weave header lines it may have copied
    from the trace dropped, and a prose block taken out of its Markdown fence."""
    lines = [line for line in text.splitlines() if not _HEADER_LINE.match(line)]
    if kind not in blocks.CODE_KINDS:
        lines = [line for line in lines if not _FENCE_LINE.match(line)]
    return "\n".join(lines).strip("\n")


Messages = list[dict[str, str]]
#: The most tokens a chat model's prose block (orientation, expectation, debug) may take.
PROSE_TOKENS = 64


def _runtime_turn(kind: str, text: str, tick: int, meta: Mapping[str, object] | None = None) -> str:
    """A block the runtime wrote (or is about to), as the user turn says it."""
    meta = meta or {}
    limit = meta.get(blocks.CONTEXT_CHARS_META)
    if isinstance(limit, int) and len(text) > limit:
        text = blocks.clip_body(text, limit)
    if kind == blocks.OBSERVATION:
        return f"Observation ({meta.get('title') or 'untitled'}):\n{text}"
    if kind == blocks.ERROR:
        return f"The action failed:\n{text.strip()[-ERROR_CHARS:]}"
    if kind == blocks.OUTCOME:
        return f"The outcome of tick {tick}:\n{text}"
    if kind == blocks.OPTION:
        return f"Do the observation views need to change? {text}"
    return text


#: The most characters of an error a turn shows (its end: the traceback's last lines).
ERROR_CHARS = 1500


def chat_turns(path: Sequence[Node], collapsed: Sequence[int], form: str) -> Messages:
    """The session so far as chat turns: the system turn (what the agent is, the genesis),
    then for every block the model wrote, a user turn with what the runtime reported
    before it and what the block is for, and the block as the assistant's reply. The
    runtime's blocks after the last reply are returned as a final user turn still open
    (its content ends where the next ask goes)."""
    if not path:
        return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": ""}]
    messages: Messages = [{"role": "system", "content": f"{SYSTEM}\n\n{path[0].text}"}]
    pending: list[str] = []
    folded = set(collapsed)
    given: dict[str, str] = {}  # the task's own asks, from its reminders
    for tick, nodes in blocks.group_ticks(path[1:]):
        if tick in folded:
            pending.append(blocks.tick_summary(tick, nodes).strip())
            continue
        for node in nodes:
            if node.kind == blocks.TASK_REMINDER:
                given = task_asks([node])
            if node.kind in blocks.MODEL_KINDS:
                pending.append(given.get(node.kind) or ask(node.kind, form))
                messages.append({"role": "user", "content": "\n\n".join(pending)})
                messages.append(
                    {"role": "assistant", "content": reply(node.kind, said(node, form))}
                )
                pending = []
            else:
                pending.append(_runtime_turn(node.kind, node.text, node.tick, node.meta))
    messages.append({"role": "user", "content": "\n\n".join(pending)})
    return messages


def said(node: Node, form: str) -> str:
    """A model block as its reply shows it later: of a file block the token limit cut, the
    files it wrote (`forms.as_run`). Shown cut off mid-line inside its fence, the coder took
    that for how a block ends and cut its next ones there."""
    return forms.as_run(node.kind, form, node.text, node.truncated) or node.text


#: A chat model's code block is its reply begun with this fence (so it writes code, not
#: words about code), and ends where it closes the fence.
CODE_FENCE = "```python\n"
CODE_FENCE_END = "```"


def prefill(kind: str) -> str:
    """What a chat reply of `kind` is begun with for the model."""
    return CODE_FENCE if kind in blocks.CODE_KINDS else ""


def reply(kind: str, body: str) -> str:
    """A block's body as the model's whole reply: a code block in its fence."""
    return f"{CODE_FENCE}{body.rstrip()}\n{CODE_FENCE_END}" if kind in blocks.CODE_KINDS else body


#: The task-reminder node's metadata key for the task's own asks (`Task.asks`).
TASK_ASKS_META = "asks"


def task_asks(path: Sequence[Node]) -> dict[str, str]:
    """The asks the session's task gives in place of the form's, by block kind: what the
    last task reminder on `path` carries."""
    for node in reversed(path):
        if node.kind == blocks.TASK_REMINDER:
            found = node.meta.get(TASK_ASKS_META)
            return dict(found) if isinstance(found, dict) else {}
    return {}


def asks(form: str) -> list[str]:
    """Every ask of `form`: text a block that says it back has copied (`agents.ranking`)."""
    return [ask(kind, form) for kind in sorted(blocks.MODEL_KINDS)]


def block_turns(path: Sequence[Node], collapsed: Sequence[int], kind: str, form: str) -> Messages:
    """The turns a block of `kind` was asked for with after `path` (what training gives
    the model before the block's body, as the agent did). An action is asked for with
    the task said again: a small model follows the end of its prompt."""
    asked = task_asks(path).get(kind) or ask(kind, form)
    if kind == blocks.ACTION:
        task = next((n.text for n in reversed(path) if n.kind == blocks.TASK_REMINDER), "")
        asked = f"{task}\n\n{asked}" if task else asked
    return _asking(chat_turns(path, collapsed, form), asked)


def _asking(messages: Messages, text: str) -> Messages:
    """`messages` with `text` added to the open user turn."""
    last = messages[-1]
    content = f"{last['content']}\n\n{text}" if last["content"] else text
    return [*messages[:-1], {"role": "user", "content": content}]


@dataclass(frozen=True, slots=True)
class Prompter:
    """What the model is given for a block or a question, in one style, for one form of
    code block."""

    style: str
    form: str
    #: the model's chat template (`Backend.render_chat`); used by the chat style only
    render_chat: Callable[[Sequence[dict[str, str]]], str] | None = None

    def __post_init__(self) -> None:
        if self.style not in STYLES:
            raise ValueError(f"the prompt style must be one of {', '.join(STYLES)}")
        if self.form not in forms.FORMS:
            raise ValueError(f"the block form must be one of {', '.join(forms.FORMS)}")
        if self.style == CHAT and self.render_chat is None:
            raise ValueError("the chat style needs the model's chat template")

    def block(
        self,
        context: str,
        header: str,
        kind: str,
        path: Sequence[Node] = (),
        collapsed: Sequence[int] = (),
    ) -> str:
        """The prompt a block of `kind` is sampled after `path`: the document (the context
        with `collapsed` ticks folded, and the block's forced header), or the chat turns
        ending with the ask for the block."""
        if self.style == DOCUMENT:
            return context + header
        assert self.render_chat is not None
        return self.render_chat(block_turns(path, collapsed, kind, self.form)) + prefill(kind)

    def question(
        self,
        document: str,
        body: str,
        question: str,
        kind: str = "",
        path: Sequence[Node] = (),
        collapsed: Sequence[int] = (),
    ) -> str:
        """The prompt the yes/no `question` about a block of `kind` is scored after: the
        document and the block with its `#q:` line, or the chat turns with the block as
        the reply (the runtime's block: in the user turn) and the question after it."""
        if self.style == DOCUMENT:
            return ranking.question_prompt(document, body, question)
        assert self.render_chat is not None
        asked = f"{question} Answer Yes or No."
        if kind in blocks.MODEL_KINDS:
            turns = block_turns(path, collapsed, kind, self.form)
            turns += [
                {"role": "assistant", "content": reply(kind, body)},
                {"role": "user", "content": asked},
            ]
        else:
            shown = _runtime_turn(kind, body, path[-1].tick if path else 0)
            turns = chat_turns(path, collapsed, self.form)
            turns = _asking(turns, f"{shown}\n\n{asked}" if body else asked)
        return self.render_chat(turns)

    def max_tokens(self, kind: str, block_tokens: int) -> int:
        """The most tokens a block of `kind` may take: a chat model's prose block at most
        PROSE_TOKENS (it says what the user turn said back, at length, when let)."""
        if self.style == CHAT and kind not in blocks.CODE_KINDS:
            return min(block_tokens, PROSE_TOKENS)
        return block_tokens

    def stop(self, kind: str) -> tuple[str, ...]:
        """Where generation of a block of `kind` stops: the block's end (and, for a
        document, a new block or a `#q:` line); a chat reply ends at the template's end of
        turn, or a code block at the end of its fence, and a header it copies from the
        trace is dropped (`clean`), not a reason to stop."""
        if self.style == DOCUMENT:
            return blocks.STOP
        return (
            (CODE_FENCE_END, blocks.END_MARKER)
            if kind in blocks.CODE_KINDS
            else (blocks.END_MARKER,)
        )

    def body(self, kind: str, text: str) -> str:
        """The block's body from what the model wrote."""
        return text.rstrip() if self.style == DOCUMENT else clean(kind, text)

    def meta(self) -> dict[str, str]:
        """What a model-written block stores about how it was asked for (nothing for the
        document style and callback form, the weave-agent defaults)."""
        meta = {}
        if self.style != DOCUMENT:
            meta["prompt"] = self.style
        if self.form != forms.CALLBACK:
            meta["form"] = self.form
        return meta

    @property
    def overhead(self) -> str:
        """Text standing for what the style adds to the document (the context's budget
        keeps room for it)."""
        if self.style == DOCUMENT:
            return ""
        asks = [ask(k, self.form) for k in blocks.MODEL_KINDS]
        return SYSTEM + max(asks, key=len) + " " * 64
