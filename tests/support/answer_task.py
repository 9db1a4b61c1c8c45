"""A small real task for runtime and console tests: write the answer to a file; one
evaluation callback checks it; SOLVE is an operator's edit that solves it."""

from __future__ import annotations

from agents.tasks import Task

CHECKS = """
def check_answer(subagent):
    try:
        return subagent.read_file("answer.txt").strip() == "42"
    except FileNotFoundError:
        return False
self.add_evaluation("check_answer", check_answer)
"""

TASK = Task(
    name="answer",
    title="Write the answer",
    prompt="Read question.txt and write the answer to answer.txt.",
    files={"question.txt": "What is six times seven?\n"},
    checks=CHECKS,
    check_names=("check_answer",),
    source="test",
)

SOLVE = """def solve(subagent):
    subagent.write_file("answer.txt", "42\\n")
    subagent.tell_operator("I wrote 42 to answer.txt")
    return "written"
self.add_action("Write the answer", solve)"""


def task_toml(passes: bool, *, title: str = "Answer the question", max_ticks: int = 0) -> str:
    """A task file whose checks pass (the session completes in its first tick) or never
    do, whatever the model writes: outcomes a test can count on."""
    limit = f"max_ticks = {max_ticks}\n" if max_ticks else ""
    return f"""\
title = "{title}"
prompt = "Write the answer to answer.txt."
{limit}checks = '''
def check_seeded(subagent):
    return subagent.read_file("question.txt").startswith("What")
def check_done(subagent):
    return {passes}
'''
[files]
"question.txt" = "What is six times seven?"
"""
