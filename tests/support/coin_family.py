"""A task family whose checks decide by the variant alone: a third of its variants pass
whatever the agent does (`coin`). The tiny model writes noise, so this is how an
improvement run's tests get solved and failed sessions they can count on.

`register()` adds it to the families; a Ray test names it as the workers' setup hook
(`worker_process_setup_hook`), since a worker process has only the built-in families."""

from __future__ import annotations

import random

from agents.tasks.families import FAMILIES, Family

NAME = "coin"


def coin(rng: random.Random) -> dict[str, object]:
    """A variant whose checks pass (one in three) or fail, whatever the agent does."""
    passes = rng.random() < 0.34
    return {
        "title": "Write the answer",
        "prompt": "Write the answer to answer.txt.",
        "files": {"question.txt": "What is six times seven?"},
        "checks": f"def check_done(subagent):\n    return {passes}\n",
        "orientation": "The question is in question.txt.",
        "action": 'self.add_action("answer", lambda subagent: 42)',
        "evaluation": "",
        "targets": ("question.txt", "answer.txt"),
    }


def coin_passes(seed: int) -> bool:
    return random.Random(f"coin:{seed}").random() < 0.34


FAMILY = Family(NAME, "Write the answer", coin)


def register() -> None:
    FAMILIES[NAME] = FAMILY
