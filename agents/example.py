"""A worked example of a whole tick, shown before a session's own blocks.

A base model learns the block format from what comes before it in the document. The
example is one short session of another task, rendered with the same functions as the
session's own blocks (so its headers, `#q:` lines and outcome table look exactly like the
real ones), between two lines that say plainly it is an example of another task. Its task
(counting words into a file) is unlike every shipped task, so copying it solves nothing.

It is a fixed text: its version is stored on the session's genesis block (`EXAMPLE_META`),
so a prompt re-rendered later for training is byte for byte the prompt the model saw, and
a later example is a new version, never a change to this one.

This module holds the example's text; `agents.blocks.example_text` renders it.
"""

from __future__ import annotations

#: The genesis block's metadata key naming the example version shown before it.
EXAMPLE_META = "example"
#: The version new sessions get.
CURRENT = 1

TITLE = "Count the words in notes.txt"
PROMPT = "Count the words in notes.txt and write the count, as a number, to count.txt."
START = (
    "#example session: ANOTHER TASK, NOT YOURS. It shows how the blocks of a tick are written.\n"
)
END = (
    "#end of the example session. Your own session starts below: its task, its files and "
    "its checks are different; write your blocks for them.\n"
)

ORIENTATION = """\
# The task is to count the words in notes.txt and write that number to count.txt.
# The work directory holds notes.txt only, so count.txt does not exist yet.
# The check compares count.txt with the real count, so count.txt must hold only the
# number. Plan: read notes.txt, split it on whitespace, write the count to count.txt."""

ACTION = """\
def write_word_count(subagent):
    text = subagent.read_file("notes.txt")
    count = len(text.split())
    subagent.write_file("count.txt", str(count))
    return count
self.add_action("Write the word count of notes.txt to count.txt", write_word_count)"""

EXPECTATION = """\
# The action succeeds if it returns a number and count.txt then holds that number and
# nothing else. It fails if reading notes.txt raises, or count.txt is missing or holds
# anything else."""

EVALUATION = """\
def count_file_holds_number(subagent):
    return subagent.read_file("count.txt").strip().isdigit()
self.add_evaluation("count.txt holds a number", count_file_holds_number)"""


#: The example's blocks' timestamps: fixed, so the text never changes.
EPOCH = 1767225600.0


def example_bodies(version: int = CURRENT) -> list[str]:
    """The texts of the example's blocks: a candidate that copies one is a copy."""
    if version != 1:
        raise ValueError(f"no example version {version}")
    reminder = f"Task: {TITLE}\n{PROMPT}"
    return [PROMPT, reminder, ORIENTATION, ACTION, EXPECTATION, EVALUATION]
