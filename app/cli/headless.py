"""`agent-console --query`: one session, headless, to the end.

The agent's final message goes to stdout (or, with `--json`, one JSON event per line);
progress goes to stderr. Nobody is there to approve actions, so the policy decides
(`ask` acts as `deny`). Exit codes: 0 completed, 1 failed, 3 model unavailable,
4 truncated, 130 interrupted (Ctrl-C, SIGTERM or SIGHUP: the session is stored as aborted,
`--resume ID` continues it).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from typing import TYPE_CHECKING, TextIO

from agents.events import (
    RuntimeEvent,
    SamplingProgress,
    candidates,
    progress_line,
)
from agents.runtime import session_options
from agents.safe_text import escape_controls
from app import exit_codes
from app.cli.common import open_model, open_store, refuse_without_sandbox
from app.cli.failing import command_fail
from app.signals import ending_on_signals

if TYPE_CHECKING:
    from agents.settings import Settings

#: The block statuses `--query` prints a line for.


fail = command_fail(None)


class ProgressPrinter:
    """Prints one line per step on stderr, led by the seconds since the session started
    (and every event as JSON on stdout with --json)."""

    def __init__(self, as_json: bool, out: TextIO = sys.stdout, err: TextIO = sys.stderr):
        self.as_json = as_json
        self.out = out
        self.err = err
        self.started = time.monotonic()
        #: the block whose first tokens were shown (one line per block, not per token)
        self._streaming: tuple[int, str] | None = None

    def __call__(self, event: RuntimeEvent) -> None:
        if self.as_json:
            self.out.write(json.dumps(event.as_json(), default=str) + "\n")
            self.out.flush()
        if isinstance(event, SamplingProgress):
            line = self.describe_sampling(event)
        else:
            line = progress_line(event)
        if line:
            # a line may hold what the model wrote (a message, an evaluation's title)
            self.err.write(f"{time.monotonic() - self.started:7.1f} s  {escape_controls(line)}\n")
            self.err.flush()

    def describe_sampling(self, event: SamplingProgress) -> str | None:
        """The first tokens of each block, once: proof of life within seconds."""
        block = (event.tick, event.block)
        if self._streaming == block:
            return None
        self._streaming = block
        first = " ".join(event.text.split())[:80]
        return (
            f"tick {event.tick} {event.block}: sampling {candidates(event.candidates)} "
            f"({event.seconds:.1f} s to the first tokens: {first!r})"
        )


def run_query(args: argparse.Namespace, settings: Settings) -> int:
    # SIGTERM and SIGHUP end the run as Ctrl-C does, from the model's loading on
    with ending_on_signals():
        return _run_query(args, settings)


def _run_query(args: argparse.Namespace, settings: Settings) -> int:
    from agents.runtime import Runtime, resume_options, task_from_snapshot
    from agents.tasks import TaskError, load_task, prompt_task
    from storage import NotFoundError, SessionStatus

    message: str | None = None
    try:
        if args.resume is not None:
            if args.task:
                return fail("--resume continues the session's own task: drop --task", 2)
            message = args.query
        elif args.task:
            task = load_task(args.task)
            message = args.query
        else:
            if not (args.query or "").strip():
                return fail("--query needs the task as text (or --task NAME)", exit_codes.USAGE)
            task = prompt_task(args.query)
    except TaskError as exc:
        return fail(str(exc), exit_codes.USAGE)

    refused = refuse_without_sandbox(args.unsafe_no_sandbox, fail)
    if refused is not None:
        return refused

    store = open_store(settings, fail)
    if isinstance(store, int):
        return store
    with store:
        if args.resume is not None:
            try:
                session = store.get_session(args.resume)
            except NotFoundError:
                return fail(f"--resume {args.resume}: no such session", exit_codes.USAGE)
            if session.status is SessionStatus.COMPLETED:
                return fail(f"session {session.id} is completed: nothing to resume", 2)
            task = task_from_snapshot(session.settings.get("task", {}))

        adapter = getattr(args, "adapter_name", None)
        if args.resume is not None and adapter is None:
            adapter = session.adapter  # resumed with the adapter it was started with
        opened = open_model(settings, store, adapter, fail)
        if isinstance(opened, int):
            return opened
        backend = opened
        # The model's objects live as long as the run: keep them out of every full
        # collection (measured: a third less runtime overhead per tick on a CPU).
        gc.freeze()

        unsafe = args.unsafe_no_sandbox  # never carried over: each run says so itself
        options = session_options(settings, backend, task, unsafe_no_sandbox=unsafe)
        if args.resume is not None:  # as it was started, but for what a flag changes
            chosen = {**getattr(args, "chosen", {}), "unsafe_no_sandbox": unsafe}
            options = resume_options(store, session, options, chosen)
        runtime = Runtime(
            store,
            backend,
            task,
            options,
            sessions_dir=settings.sessions_dir(),
            listener=ProgressPrinter(args.json),
            resume=args.resume,
        )
        if message:
            runtime.post_message(message)
        try:
            outcome = runtime.run()
        finally:
            backend.close()

    if args.json:
        end = {
            "event": "end",
            "session": outcome.session_id,
            "status": outcome.status.value,
            "message": outcome.message,
            "reason": outcome.reason,
            "ticks": outcome.ticks,
            "tokens": outcome.tokens,
        }
        print(json.dumps(end), flush=True)
    if outcome.backend_error is not None:
        # the server went away mid-session: the blocks so far are stored, say how to go on
        sid = outcome.session_id
        hint = f" (session {sid} is stored as failed; to go on: {resume_command(args, sid)})"
        hint = hint if sid else ""
        return fail(f"{outcome.backend_error}{hint}", exit_codes.MODEL)
    if not args.json:
        print(escape_controls(outcome.message), flush=True)
    if outcome.status is SessionStatus.ABORTED and outcome.session_id:
        sid = outcome.session_id
        print(
            f"agent-console: session {sid} {escape_controls(outcome.reason or 'aborted')}; "
            f"to go on: {resume_command(args, sid)}",
            file=sys.stderr,
            flush=True,
        )
    return {
        SessionStatus.COMPLETED: exit_codes.OK,
        SessionStatus.TRUNCATED: exit_codes.TRUNCATED,
        SessionStatus.ABORTED: exit_codes.INTERRUPTED,
    }.get(outcome.status, exit_codes.FAILED)


def resume_command(args: argparse.Namespace, session_id: int) -> str:
    """The command that continues session `session_id` (in the same store)."""
    import shlex

    db = f" --db {shlex.quote(args.db)}" if args.db else ""
    return f"agent-console{db} --resume {session_id}"
