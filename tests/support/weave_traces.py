"""Hand-written weave-agent event traces, one per vintage of its field names, as its
`dump_event_stream` writes them (a list of block dicts in stream order)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ACTION = """def write_greeting(subagent):
    with open("hello.txt", "w") as outfile:
        outfile.write("hello")
    return True

self.add_action("Write the greeting", write_greeting)"""

ALTERNATE = """def do_nothing(subagent):
    return False

self.add_action("Do nothing", do_nothing)"""

EVALUATION = """def check_file(subagent):
    return open("hello.txt").read() == "hello"

self.add_evaluation("hello.txt says hello", check_file)"""

T0 = 1737530000.1305623


def modern() -> list[dict[str, Any]]:
    """A trace of today's weave-agent: `body` everywhere, subagents, time budgets, block
    sizes, retrieval queries, tags, candidates, outcomes, infinite and NaN scores, a block
    type we have never seen and a field nobody documented."""
    return [
        {
            "type": "genesis",
            "body": "# bootstrap\nimport os\n",
            "index": 0,
            "timestamp": T0,
            "q": "",
            "score": 2,
        },
        {
            "type": "bootstrap",
            "body": "self.add_action('Start', start)",
            "index": 1,
            "timestamp": T0 + 1,
            "q": "",
            "score": 2,
        },
        {
            "type": "task-reminder",
            "subagent": "main",
            "body": "Write hello.txt with a greeting.",
            "index": 2,
            "timestamp": T0 + 2.25,
            "time_remaining": 21552.5,
            "q": "",
            "score": 2,
        },
        {
            "type": "observation",
            "subagent": "main",
            "title": "Files",
            "body": "hello.txt is missing\n\nnothing else",
            "index": 3,
            "timestamp": T0 + 3,
            "time_remaining": 21551.0,
            "q": "",
            "score": 2,
        },
        {
            "type": "observation",
            "subagent": "main",
            "title": "Board",
            "body": {"x": 1, "rows": [1, 2]},
            "index": 4,
            "timestamp": T0 + 3.5,
            "q": "",
            "score": 2,
        },
        {
            "type": "orientation",
            "subagent": "main",
            "body": "I should write the file.",
            "index": 5,
            "timestamp": T0 + 4,
            "time_remaining": 21550.0,
            "block_size": "full",
            "bm25_query": "type:'orientation' +file",
            "q": "Is this orientation good?",
            "score": 1.5,
            "metadata": {"block_index": 5, "working_directory": "/app"},
            "tags": ["write", "file"],
        },
        {
            "type": "task-inference",
            "body": "# the task stands\n",
            "index": 6,
            "timestamp": T0 + 5,
            "block_size": "half",
            "q": "Is the task list right?",
            "score": 0.3,
            "metadata": {
                "task_id": 1,
                "task_title": "Write hello",
                "task_status": "going",
                "task_explanation": "on it",
            },
        },
        {
            "type": "action",
            "subagent": "main",
            "body": ACTION,
            "index": 7,
            "timestamp": T0 + 6,
            "time_remaining": 21548.0,
            "block_size": "quarter",
            "q": "Is this action good?",
            "score": 2.2,
            "candidates": [[ALTERNATE, -1.0]],
            "raw_score": 1.9,
            "outcome": {"id": 7, "body": ACTION, "error": None, "result": True},
        },
        {
            "type": "expectation",
            "body": "The file should say hello.",
            "index": 8,
            "timestamp": T0 + 7,
            "q": "Is this expectation testable?",
            "score": float("inf"),
        },
        {
            "type": "option",
            "body": "No.",
            "q": "Do I need new observation views?",
            "score": -1.2,
            "index": 9,
            "timestamp": T0 + 8,
        },
        {
            "type": "evaluation",
            "body": EVALUATION,
            "index": 10,
            "timestamp": T0 + 9,
            "q": "Does this check the expectation?",
            "score": float("nan"),
            "outcome": {"id": 10, "body": EVALUATION, "error": None, "result": True},
        },
        {
            "type": "error",
            "body": '# Evaluation failed: \n"""Traceback: KeyError"""',
            "index": 11,
            "timestamp": T0 + 10,
            "q": "",
            "score": 2,
        },
        {
            "type": "debate",
            "body": "an unknown kind of block",
            "index": 12,
            "timestamp": T0 + 11,
            "speaker": "A",
        },
        {
            "type": "outcome",
            "subagent": "main",
            "index": 13,
            "timestamp": T0 + 12,
            "time_remaining": 21540.0,
            "table": [
                ["Write the greeting", True],
                ["hello.txt says hello", True],
                ["greeting is polite", "ERROR"],
                ["word count", 0],
            ],
            "q": "",
            "score": 2,
            "reward": {"evals": [["hello.txt says hello", True]], "value": 0.25},
        },
    ]


def legacy() -> list[dict[str, Any]]:
    """An early trace: each block's text under a key named by its type (`program`,
    `content`, `task`, `message`), no subagents or time budgets."""
    return [
        {"type": "genesis", "program": "# the first bootstrap\n", "index": 0, "timestamp": T0},
        {"type": "task-reminder", "task": "Write hello.txt.", "index": 1, "timestamp": T0 + 1},
        {
            "type": "observation",
            "title": "Files",
            "content": "nothing yet",
            "index": 2,
            "timestamp": T0 + 2,
        },
        {
            "type": "orientation",
            "program": "Write it.",
            "index": 3,
            "timestamp": T0 + 3,
            "q": "Good?",
            "score": 0.5,
        },
        {
            "type": "action",
            "program": ACTION,
            "index": 4,
            "timestamp": T0 + 4,
            "q": "Is this action good?",
            "score": -0.5,
            "outcome": {"id": 4, "body": ACTION, "error": "PermissionError", "result": None},
        },
        {
            "type": "error",
            "message": '# Action execution failed:\n"""PermissionError"""',
            "index": 5,
            "timestamp": T0 + 5,
        },
        {"type": "expectation", "program": "It fails.", "index": 6, "timestamp": T0 + 6},
        {"type": "evaluation", "program": EVALUATION, "index": 7, "timestamp": T0 + 7},
        {
            "type": "outcome",
            "index": 8,
            "timestamp": T0 + 8,
            "table": [["Write the greeting", "ERROR"], ["hello.txt says hello", False]],
        },
    ]


def write_trace(folder: Path, trace: list[dict[str, Any]], stamp: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"event_trace_{stamp}.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    return path
