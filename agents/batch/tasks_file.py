"""A batch's tasks file (a JSON object per line) or a suite's selection, read into task
specs: each line checked, with its file and line named in the error."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.tasks import TASK_SUFFIXES, Task, TaskError, load_task, prompt_task
from agents.tasks.families import FAMILIES, parse_seeds, split
from agents.tasks.suites import absolute_ref, is_suite_ref, select, short_name
from agents.user_files import json_object_line, read_user_file

if TYPE_CHECKING:
    pass


#: What a line of the tasks file may hold.
SPEC_KEYS = {
    "task": "a shipped task's name, family:NAME:SEED, a benchmark's problem (humaneval:12, "
    "jsonl:PATH:TASK_ID), or a task file (.toml or .py; relative to the tasks file)",
    "family": 'a task family: one task per seed of "seeds"',
    "seeds": 'the family\'s seeds, such as "0-29" or "3,5,8", or its "held-out" or "teaching" set',
    "prompt": "the task as free text",
    "id": "your name for the task (shown in the results)",
    "message": "a first message from the operator",
    "max_ticks": "the most ticks the session may take",
}


#: A tasks file larger than this is refused unread (a line per task, not the data).
MAX_TASKS_FILE_BYTES = 64 << 20


class TasksFileError(ValueError):
    """A tasks file that cannot be run; the message names the line."""


def read_tasks(path: str | Path) -> tuple[list[dict[str, Any]], str]:
    """The task specs of a JSON-lines tasks file, each checked by loading its task, and
    the hash of the file's content. Relative task files are made absolute (workers on
    other machines and later resumes find them)."""
    source = Path(path)
    try:
        data = read_user_file(source, MAX_TASKS_FILE_BYTES, "tasks file")
    except OSError as exc:
        raise TasksFileError(f"{source}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TasksFileError(f"{source}: not UTF-8 text (byte {exc.start})") from None
    specs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{source} line {number}"
        specs.extend(_specs(line, where, source.parent))
    if not specs:
        raise TasksFileError(
            f"{source}: no tasks (one JSON object per line, e.g. "
            '{"task": "vigenere"} or {"prompt": "..."})'
        )
    return specs, hashlib.sha256(data).hexdigest()


def _specs(line: str, where: str, folder: Path) -> list[dict[str, Any]]:
    """The specs of one line: one, or one per seed of a family line."""
    spec = json_object_line(line, where, 'such as {"task": "vigenere"}', TasksFileError)
    if "family" not in spec and "seeds" not in spec:
        return [_spec(spec, where, folder)]
    family, seeds = spec.pop("family", None), spec.pop("seeds", None)
    if not isinstance(family, str) or not isinstance(seeds, str | int) or isinstance(seeds, bool):
        raise TasksFileError(
            f'{where}: a family line needs "family" (a name) and "seeds" (such as "0-29")'
        )
    if "task" in spec or "prompt" in spec or "id" in spec:
        raise TasksFileError(f'{where}: a family line names no "task", "prompt" or "id"')
    try:
        if seeds in ("teaching", "held-out"):
            if family not in FAMILIES:
                raise ValueError(f"no such task family {family!r}")
            numbers = split(family)[seeds == "held-out"]
        else:
            numbers = parse_seeds(str(seeds))
    except ValueError as exc:
        raise TasksFileError(f"{where}: {exc}") from None
    return [_spec({**spec, "task": f"family:{family}:{seed}"}, where, folder) for seed in numbers]


def _spec(spec: dict[str, Any], where: str, folder: Path) -> dict[str, Any]:
    unknown = sorted(set(spec) - set(SPEC_KEYS))
    if unknown:
        known = ", ".join(SPEC_KEYS)
        raise TasksFileError(f"{where}: unknown key {unknown[0]!r} (known: {known})")
    if ("task" in spec) == ("prompt" in spec):
        raise TasksFileError(f'{where}: give either "task" or "prompt"')
    for key in ("task", "prompt", "id", "message"):
        if key in spec and not isinstance(spec[key], str):
            raise TasksFileError(f'{where}: "{key}" must be a string')
    ticks = spec.get("max_ticks")
    if ticks is not None and (not isinstance(ticks, int) or isinstance(ticks, bool) or ticks < 1):
        raise TasksFileError(f'{where}: "max_ticks" must be a whole number from 1')
    ref = spec.get("task")
    if ref is not None and ref.startswith("family:") and ref.count(":") < 2:
        raise TasksFileError(
            f'{where}: name the variant ("{ref}:7") or give a family line '
            '({"family": NAME, "seeds": "0-29"}): a batch runs the same tasks on a resume'
        )
    if ref is not None and is_suite_ref(ref):
        try:
            spec["task"] = absolute_ref(ref, folder)
        except TaskError as exc:
            raise TasksFileError(f"{where}: {exc}") from None
    elif ref is not None and ("/" in ref or "\\" in ref or ref.endswith(TASK_SUFFIXES)):
        # a task file: relative to the tasks file, made absolute for workers and resumes
        given = Path(ref).expanduser()
        spec["task"] = str((given if given.is_absolute() else folder / given).resolve())
    try:
        task_of(spec)
    except TaskError as exc:
        raise TasksFileError(f"{where}: {exc}") from None
    return spec


def task_of(spec: Mapping[str, Any]) -> Task:
    if "task" in spec:
        return load_task(str(spec["task"]))
    return prompt_task(str(spec["prompt"]))


def spec_name(spec: Mapping[str, Any]) -> str:
    """How a task is named in progress and results."""
    if spec.get("id"):
        return str(spec["id"])
    if "task" in spec:
        ref = str(spec["task"])
        if ref.startswith("family:"):
            return ref.removeprefix("family:")
        return short_name(ref) if is_suite_ref(ref) else Path(ref).stem
    prompt = " ".join(str(spec.get("prompt", "")).split())
    return prompt if len(prompt) <= 40 else prompt[:39] + "…"


def suite_tasks(spec: str) -> tuple[list[dict[str, Any]], str]:
    """The task specs of a suite's selection (`batch --suite`), as `read_tasks` gives a
    file's."""
    try:
        chosen = select(spec)
    except TaskError as exc:
        raise TasksFileError(str(exc)) from None
    return [{"task": ref} for ref in chosen.refs], chosen.digest
