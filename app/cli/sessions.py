"""`agent-console sessions`: the sessions in the store, newest first, with the ids that
`--resume`, `label --session` and `export` take."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from app import exit_codes
from app.cli.common import open_store
from app.cli.failing import command_fail
from app.text import first_line, fit

if TYPE_CHECKING:
    from agents.settings import Settings
    from storage import Session
    from storage.views import Sessions

#: Sessions read from the store a page at a time while a filter drops some.
PAGE = 500
TITLE_WIDTH = 60


def add_sessions_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from storage import SessionStatus

    sessions = commands.add_parser(
        "sessions",
        help="list the sessions in the store, newest first, with the ids --resume, "
        "label --session and export take",
        description="The sessions in the trace store, the most recently updated first: id, "
        "status (and why it ended), when, task and title. The id is what `--resume ID`, "
        "`label --session ID` and `export weave ID` take.",
    )
    sessions.add_argument(
        "--status",
        choices=[status.value for status in SessionStatus],
        help="only sessions with this status",
    )
    sessions.add_argument(
        "--task",
        dest="task_filter",
        metavar="TEXT",
        help="only sessions whose task name, source or title contains TEXT (any case)",
    )
    sessions.add_argument(
        "--limit",
        type=int,
        default=50,
        metavar="N",
        help="at most N sessions (default: 50; 0 for all)",
    )
    sessions.add_argument(
        "--json", dest="as_json", action="store_true", help="one JSON object per session a line"
    )


fail = command_fail("sessions")


def run_sessions(args: argparse.Namespace, settings: Settings) -> int:
    if args.limit < 0:
        return fail(f"--limit must be 0 or more, not {args.limit}", exit_codes.USAGE)
    store = open_store(settings, fail)
    if isinstance(store, int):
        return store
    with store:
        from agents.processes import reap_orphan_sessions

        reap_orphan_sessions(store)  # none left running by a process that is gone
        found = list(matching(store, args.status, args.task_filter, args.limit))
    if args.as_json:
        for session in found:
            print(json.dumps(as_json(session)))
        return exit_codes.OK
    if not found:
        narrowed = args.status is not None or args.task_filter is not None
        print(
            "no session matches"
            if narrowed
            else "no sessions yet: `agent-console --task NAME` or `--query TEXT` starts one"
        )
        return exit_codes.OK
    width = max(len(str(s.id)) for s in found) + 1
    for session in found:
        print(line(session, width))
    return exit_codes.OK


def matching(
    store: Sessions, status: str | None, text: str | None, limit: int
) -> Iterator[Session]:
    """The sessions with `status` whose task or title contains `text`, newest first, up
    to `limit` (0: no limit)."""
    wanted = text.casefold() if text else None
    offset, given = 0, 0
    while True:
        page = store.list_sessions(status=status, limit=PAGE, offset=offset)
        for session in page:
            if wanted is None or wanted in searchable(session):
                yield session
                given += 1
                if given == limit:
                    return
        if len(page) < PAGE:
            return
        offset += PAGE


def task_name(session: Session) -> str:
    task = session.settings.get("task")
    return str(task.get("name") or "") if isinstance(task, dict) else ""


def searchable(session: Session) -> str:
    task = session.settings.get("task")
    source = str(task.get("source") or "") if isinstance(task, dict) else ""
    return " ".join((task_name(session), source, session.title, session.task)).casefold()


def line(session: Session, width: int) -> str:
    """`#12  completed  2026-11-26 08:40  vigenere  Crack the cipher  (adapter sft-1)`."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(session.updated_at))
    status = session.status.value
    if session.status_reason and session.status.value != "completed":
        status += f" ({session.status_reason})"
    title = fit(session.title or first_line(session.task, TITLE_WIDTH), TITLE_WIDTH)
    parts = [f"#{session.id}".ljust(width), status, when, task_name(session) or "-", title]
    if session.adapter:
        parts.append(f"(adapter {session.adapter})")
    return "  ".join(parts)


def as_json(session: Session) -> dict[str, object]:
    return {
        "id": session.id,
        "status": session.status.value,
        "reason": session.status_reason or None,
        "task": task_name(session) or None,
        "title": session.title,
        "prompt": session.task,
        "backend": session.backend,
        "model": session.model,
        "adapter": session.adapter,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
    }
