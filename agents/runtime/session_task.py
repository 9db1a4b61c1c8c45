"""The session's task as the runtime keeps it: the snapshot stored with the session (enough
to resume it), the reminder each tick opens with, and whether a stored session solved it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from agents import blocks
from agents.runtime.options import RunOptions
from agents.tasks import Task

if TYPE_CHECKING:
    from storage import Session
    from storage.views import Trees

REMINDER_CHARS = 600


def task_snapshot(task: Task) -> dict[str, Any]:
    """What a session stores about its task, enough to resume it."""
    return {
        "name": task.name,
        "title": task.title,
        "prompt": task.prompt,
        "checks": task.checks,
        "check_names": list(task.check_names),
        "max_ticks": task.max_ticks,
        "source": task.source,
        "blind": task.blind,
        "asks": dict(task.asks),
    }


def task_from_snapshot(snapshot: dict[str, Any]) -> Task:
    return Task(
        name=str(snapshot.get("name", "chat")),
        title=str(snapshot.get("title", "")),
        prompt=str(snapshot.get("prompt", "")),
        files={},
        checks=str(snapshot.get("checks", "")),
        check_names=tuple(snapshot.get("check_names", ())),
        max_ticks=snapshot.get("max_ticks"),
        source=str(snapshot.get("source", "")),
        blind=bool(snapshot.get("blind", False)),
        asks=dict(snapshot.get("asks") or {}),
    )


def task_reminder(task: Task) -> str:
    """The task-reminder block's text: the title and the prompt, cut to REMINDER_CHARS."""
    prompt = task.prompt.strip()
    if len(prompt) > REMINDER_CHARS:
        prompt = prompt[:REMINDER_CHARS].rstrip() + " [...]"
    return f"Task: {task.title}\n{prompt}"


def session_solved(store: Trees, session_id: int) -> bool:
    """Whether the session's last outcome had every one of the task's checks pass."""
    outcomes = [n for n in store.tree(session_id) if n.kind == blocks.OUTCOME]
    if not outcomes:
        return False
    return outcome_passed(outcomes[-1].meta)


def outcome_passed(meta: Mapping[str, object]) -> bool:
    """Whether an outcome block's `meta` says every one of the task's checks passed."""
    return bool(meta.get("task_total")) and meta.get("task_passed") == meta.get("task_total")


def ticks_done(store: Trees, session_id: int) -> int:
    """The ticks a session finished (its last outcome block's tick)."""
    from storage import NodeStatus

    ticks = [
        n.tick
        for n in store.tree(session_id)
        if n.kind == blocks.OUTCOME and n.status is not NodeStatus.ALTERNATE
    ]
    return max(ticks, default=0)


def resume_options(
    store: Trees, session: Session, fallback: RunOptions, chosen: dict[str, Any]
) -> RunOptions:
    """The options a stored session goes on with: those it was started with (approval,
    candidates, tokens, temperature, ... as stored), what the caller `chosen` on purpose
    over them (a flag on the command line), and the ticks it ran counted against its tick
    limit. A session stored without its options (an import) gets `fallback`."""
    fields = RunOptions.__dataclass_fields__
    stored = session.settings.get("run")
    options = fallback
    if isinstance(stored, dict) and "escalation" in stored:
        options = RunOptions.from_snapshot({k: v for k, v in stored.items() if k in fields})
    options = replace(options, **{k: v for k, v in chosen.items() if k in fields and v is not None})
    return options.within(None, ticks_done(store, session.id))


def own_check_name(title: str, task: Task) -> str:
    """The name the model's evaluation `title` runs and is stored under: told apart from a
    task check of the same name."""
    return f"{title} (the model's)" if title in task.check_names else title
