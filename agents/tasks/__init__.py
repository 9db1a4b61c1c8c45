"""Tasks: what the agent is asked to do, the files it starts with, and how success is
judged. `spec` holds the `Task` record and the checks' validation; `loading` reads a
shipped task, a task file or a prompt; `families` makes seeded variants for teaching and
held-out measure; `suites` makes benchmark problems (HumanEval, a JSON-lines file) tasks.
The shipped task files are in `shipped/`."""

from agents.tasks.loading import (
    BUILTIN_DIR,
    TASK_SUFFIXES,
    builtin_names,
    builtin_tasks,
    load_task,
    prompt_task,
    seed_workdir,
    startable_names,
)
from agents.tasks.spec import Task, TaskError

__all__ = [
    "BUILTIN_DIR",
    "TASK_SUFFIXES",
    "Task",
    "TaskError",
    "builtin_names",
    "builtin_tasks",
    "load_task",
    "prompt_task",
    "seed_workdir",
    "startable_names",
]
