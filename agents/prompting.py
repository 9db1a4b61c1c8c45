"""How the trace is put to the model: the raw document, or the model's chat template.

The weave trace is what is stored, shown, labelled and trained on, whatever the model.
A base model continues the document itself (`document`): the prompt is the context and
the forced header, and the yes/no questions follow the block as `#q:` lines. An
instruction-tuned model is asked (`chat`): the system turn says what it is, the user turn
holds the trace so far and what the next block is for, and its reply is the block's body;
a question is asked the same way about the block as written. Both are deterministic from
the stored trace, so a prompt re-renders for training exactly (`prompt_hash` is always
the document's).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents import blocks, forms, ranking

if TYPE_CHECKING:
    from storage import Node

DOCUMENT = "document"
CHAT = "chat"
STYLES = (DOCUMENT, CHAT)

SYSTEM = (
    "You are a careful Python programmer working as an agent. The user shows you the "
    "trace of your session so far: the task, the files, the blocks you wrote and what "
    "the runtime reported after running them. You write one block at a time, the one "
    "you are asked for, and nothing else. Results come only from the runtime: never "
    "write what a program printed or whether a check passed."
)

#: What each block is for, as the model is asked for it, by form.
_ASK = {
    blocks.ORIENTATION: (
        "Write the orientation block: two to four plain sentences saying what the task "
        "asks, which files matter, what the last results showed, and what this tick's "
        "action will do."
    ),
    blocks.EXPECTATION: (
        "Write the expectation block: one to three plain sentences saying how you will "
        "know whether the action above worked or failed."
    ),
    blocks.DEBUG: (
        "Write the debug block: one to three plain sentences saying why the action "
        "failed, from the error above, and what to do instead."
    ),
    blocks.BACKTRACK: (
        "Write the backtrack block: one to three plain sentences saying why the current "
        "approach is not working and what to try instead."
    ),
}
#: Said after every ask: the runtime writes the block's header and end.
_BODY_ONLY = " Reply with the block's body only: no #startblock header, no #endblock."
_ASK_CODE = {
    forms.CALLBACK: {
        blocks.ACTION: (
            "Write the action block: Python that defines a function `f(subagent)` doing "
            "this tick's step with subagent.read_file, subagent.write_file and "
            "subagent.run, then registers it with `self.add_action(title, f)`."
        ),
        blocks.EVALUATION: (
            "Write the evaluation block: Python that defines a function `f(subagent)` "
            "returning True when the action's work is right, then registers it with "
            "`self.add_evaluation(title, f)`."
        ),
        blocks.OBSERVATION_INFERENCE: (
            "Write the observation-inference block: Python that adds or removes "
            "observation views with self.add_observation_view(title, f) and "
            "self.remove_observation_view(title)."
        ),
    },
    forms.SCRIPT: {
        blocks.ACTION: (
            "Write the action block. Either the whole new content of one file, its first "
            "line `# file: PATH` (the runtime writes the file), or a Python script that "
            "the runtime runs with python3 in the work directory (what it prints is its "
            "result), its first line a `#` comment naming what it does. Write complete "
            "code, no placeholders."
        ),
        blocks.EVALUATION: (
            "Write the evaluation block: a Python script, its first line a `#` comment "
            "naming what it checks, that the runtime runs with python3 in the work "
            "directory after the action; it must exit with status 0 when the action's work "
            "is right and fail (an assert, say) when it is not."
        ),
        blocks.OBSERVATION_INFERENCE: (
            "Write the observation-inference block: Python that adds or removes "
            "observation views with self.add_observation_view(title, f) and "
            "self.remove_observation_view(title)."
        ),
    },
}


def ask(kind: str, form: str) -> str:
    """What the user turn asks for: the next block's kind and what it is for."""
    text = _ASK_CODE.get(form, _ASK_CODE[forms.CALLBACK]).get(kind) or _ASK.get(kind)
    return (text or f"Write the {kind} block.") + _BODY_ONLY


_HEADER_LINE = re.compile(r"^\s*#(startblock|endblock|index|timestamp|tick|block_size|q:)\b")
_FENCE_LINE = re.compile(r"^\s*```[\w+-]*\s*$")


def clean(kind: str, text: str) -> str:
    """A chat model's reply as a block's body: the weave header lines it may have copied
    from the trace dropped, and a prose block taken out of its Markdown fence."""
    lines = [line for line in text.splitlines() if not _HEADER_LINE.match(line)]
    if kind not in blocks.CODE_KINDS:
        lines = [line for line in lines if not _FENCE_LINE.match(line)]
    return "\n".join(lines).strip("\n")


#: The most characters of the last error the ask repeats.
ERROR_CHARS = 800
#: Room kept for the task said again (a reminder is at most 600 characters and its title).
REMINDER_ROOM = 760


def chat_messages(
    document: str, kind: str, form: str, task: str = "", error: str = ""
) -> list[dict[str, str]]:
    """The turns a block of `kind` is asked for with, after the trace `document`; the
    task said again right before the ask, and the last error when the block follows one
    (a small model reads the end of its prompt best)."""
    parts = [document.rstrip()]
    if task:
        parts.append(f"Your task: {task.strip()}")
    if error:
        tail = error.strip()[-ERROR_CHARS:]
        parts.append(f"The last action failed:\n{tail}\nDo not repeat it: fix the cause.")
    parts.append(ask(kind, form))
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "\n\n".join(parts)},
    ]


def situation(path: Sequence[Node]) -> tuple[str, str]:
    """(the task as last reminded, the error the path ends on, if it does): what the ask
    repeats, read from the trace so that a prompt re-renders from it."""
    task = next((n.text for n in reversed(path) if n.kind == blocks.TASK_REMINDER), "")
    error = path[-1].text if path and path[-1].kind == blocks.ERROR else ""
    return task, error


def question_messages(document: str, body: str, question: str) -> list[dict[str, str]]:
    """The turns a yes/no question about a block (`document` ends with its header) is
    asked with."""
    block = f"{body.rstrip()}\n{blocks.END_MARKER}\n" if body.strip() else ""
    text = f"{document}{block}\n{question} Answer Yes or No."
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


@dataclass(frozen=True, slots=True)
class Prompter:
    """Turns the document (the rendered context and a block's header) into what the
    model is given, in one style."""

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

    def block(self, context: str, header: str, kind: str, path: Sequence[Node] = ()) -> str:
        """The prompt a block of `kind` is sampled after `path`: the document (the context
        and the block's forced header), or the chat turns asking for the block."""
        if self.style == DOCUMENT:
            return context + header
        assert self.render_chat is not None
        task, error = situation(path)
        return self.render_chat(chat_messages(context, kind, self.form, task, error))

    def question(self, document: str, body: str, question: str) -> str:
        """The prompt the yes/no `question` about a block is scored after."""
        if self.style == DOCUMENT:
            return ranking.question_prompt(document, body, question)
        assert self.render_chat is not None
        return self.render_chat(question_messages(document, body, question))

    @property
    def stop(self) -> tuple[str, ...]:
        """Where generation stops: the block's end (and, for a document, a new block or a
        `#q:` line); a chat reply ends at the template's end of turn, and a header it
        copies from the trace is dropped (`clean`), not a reason to stop."""
        return blocks.STOP if self.style == DOCUMENT else (blocks.END_MARKER,)

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
        longest = max((ask(k, self.form) for k in blocks.MODEL_KINDS), key=len)
        return SYSTEM + longest + " " * (ERROR_CHARS + REMINDER_ROOM)
