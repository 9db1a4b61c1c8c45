"""A worked example of a whole tick, shown before a session's own blocks.

A base model learns the block format from what comes before it in the document. The
example is one short session of another task, rendered with the same functions as the
session's own blocks (so its headers, `#q:` lines and outcome table look exactly like the
real ones), between two lines that say plainly it is an example of another task. Its task
(counting words into a file) is unlike every shipped task, so copying it solves nothing.

It is a fixed text: its version is stored on the session's genesis block (`EXAMPLE_META`),
so a prompt re-rendered later for training is byte for byte the prompt the model saw, and
a later example is a new version, never a change to this one.
"""

from __future__ import annotations

from functools import cache

from agents import blocks

#: The genesis block's metadata key naming the example version shown before it.
EXAMPLE_META = "example"
#: The version new sessions get.
CURRENT = 1

_TITLE = "Count the words in notes.txt"
_PROMPT = "Count the words in notes.txt and write the count, as a number, to count.txt."
_START = (
    "#example session: ANOTHER TASK, NOT YOURS. It shows how the blocks of a tick are written.\n"
)
_END = (
    "#end of the example session. Your own session starts below: its task, its files and "
    "its checks are different; write your blocks for them.\n"
)

_ORIENTATION = """\
# The task is to count the words in notes.txt and write that number to count.txt.
# The work directory holds notes.txt only, so count.txt does not exist yet.
# The check compares count.txt with the real count, so count.txt must hold only the
# number. Plan: read notes.txt, split it on whitespace, write the count to count.txt."""

_ACTION = """\
def write_word_count(subagent):
    text = subagent.read_file("notes.txt")
    count = len(text.split())
    subagent.write_file("count.txt", str(count))
    return count
self.add_action("Write the word count of notes.txt to count.txt", write_word_count)"""

_EXPECTATION = """\
# The action succeeds if it returns a number and count.txt then holds that number and
# nothing else. It fails if reading notes.txt raises, or count.txt is missing or holds
# anything else."""

_EVALUATION = """\
def count_file_holds_number(subagent):
    return subagent.read_file("count.txt").strip().isdigit()
self.add_evaluation("count.txt holds a number", count_file_holds_number)"""


#: The example's blocks' timestamps: fixed, so the text never changes.
_EPOCH = 1767225600.0


def _block(index: int, kind: str, body: str, **fields: object) -> str:
    block: dict[str, object] = {"type": kind}
    if kind != blocks.OUTCOME:
        block["body"] = body
    block.update(index=index, timestamp=_EPOCH + 7 * index, **fields)
    return blocks.render_weave(block)


def example_bodies(version: int = CURRENT) -> list[str]:
    """The texts of the example's blocks: a candidate that copies one is a copy."""
    if version != 1:
        raise ValueError(f"no example version {version}")
    reminder = f"Task: {_TITLE}\n{_PROMPT}"
    return [_PROMPT, reminder, _ORIENTATION, _ACTION, _EXPECTATION, _EVALUATION]


@cache
def example_text(version: int = CURRENT) -> str:
    """The example, rendered (one fixed text per version)."""
    if version != 1:
        raise ValueError(f"no example version {version}")
    from agents.ranking import OPTION_QUESTION, OUTCOME_QUESTION, QUESTIONS

    genesis = blocks.GENESIS_TEMPLATE.format(
        title=_TITLE,
        prompt=_PROMPT,
        workdir="/workspace",
        files="notes.txt",
        checks="count_is_right",
    )
    rows = [
        ["action: Write the word count of notes.txt to count.txt", "12"],
        ["count_is_right", "True"],
        ["count.txt holds a number", "True"],
    ]
    parts = [
        _block(0, blocks.GENESIS, genesis),
        _block(1, blocks.TASK_REMINDER, f"Task: {_TITLE}\n{_PROMPT}"),
        _block(2, blocks.OBSERVATION, "['notes.txt']", title="Files"),
        _block(3, blocks.ORIENTATION, _ORIENTATION, q=QUESTIONS[blocks.ORIENTATION], score=2.2),
        _block(4, blocks.ACTION, _ACTION, q=QUESTIONS[blocks.ACTION], score=2.9),
        _block(5, blocks.EXPECTATION, _EXPECTATION, q=QUESTIONS[blocks.EXPECTATION], score=1.7),
        blocks.render_weave({"type": blocks.OPTION, "q": OPTION_QUESTION, "score": -1.3}),
        _block(7, blocks.EVALUATION, _EVALUATION, q=QUESTIONS[blocks.EVALUATION], score=1.9),
        _block(8, blocks.OUTCOME, "", table=rows, q=OUTCOME_QUESTION, score=2.4),
    ]
    return _START + "".join(parts) + _END
