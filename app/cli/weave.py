"""`agent-console import weave PATH...` and `agent-console export weave SESSION --out DIR`:
weave-agent's event traces in and out of the trace store (see agents/weave.py)."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import TYPE_CHECKING

from app import exit_codes
from app.cli.common import open_store

if TYPE_CHECKING:
    from agents.settings import Settings


def add_import_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    imports = commands.add_parser(
        "import",
        help="import weave-agent's event traces as sessions to browse, label and train on",
        description="Import weave-agent event traces (event_trace_*.json; also the gzipped "
        "JSON-lines shards of traces2shards.py) into the trace store: each trace becomes a "
        "session, its blocks nodes in tick order, outcomes evaluation rows. Importing a file "
        "again adds nothing; a later dump of the same run adds its new blocks. A file that "
        "is not a trace is reported and the others still import.",
    )
    imports.add_argument("format", choices=("weave",), help="the trace format: weave-agent's")
    imports.add_argument(
        "paths", nargs="+", metavar="PATH", help="trace files, or folders to search for them"
    )


def fail(command: str, message: str, code: int) -> int:
    print(f"agent-console {command}: error: {message}", file=sys.stderr)
    return code


def run_import(args: argparse.Namespace, settings: Settings) -> int:
    from agents.weave import import_paths, trace_files

    for given in args.paths:
        problem = _missing(given)
        if problem is not None:
            return fail("import", f"{given}: {problem}", exit_codes.USAGE)
    if not trace_files(args.paths):
        return fail(
            "import", "no trace files (*.json, *.jsonl, *.jsonl.gz) there", exit_codes.USAGE
        )
    store = open_store(settings, partial(fail, "import"))
    if isinstance(store, int):
        return store
    with store:
        report = import_paths(store, args.paths, context_tokens=settings.context_tokens)
    for file_report in report.files:
        stream = sys.stderr if file_report.error is not None else sys.stdout
        print(file_report.describe(), file=stream)
    print(report.describe())
    return exit_codes.USAGE if report.failed else exit_codes.OK


def _missing(path: str) -> str | None:
    """Why `path` cannot be imported from before it is opened, or None."""
    from pathlib import Path

    try:
        return None if Path(path).exists() else "no such file or folder"
    except OSError as exc:  # a name too long, a folder we may not look into
        return exc.strerror or str(exc)


def run_export_weave(args: argparse.Namespace, settings: Settings) -> int:
    from agents.weave import export_session
    from storage import NotFoundError

    if args.session:
        return fail(
            "export",
            "--session goes with sft, dpo or tokens; for weave give SESSION",
            exit_codes.USAGE,
        )
    for flag in ("since", "chat", "tokenizer"):
        if getattr(args, flag):
            name = "--" + flag
            return fail(
                "export", f"{name} goes with sft, dpo or tokens, not weave", exit_codes.USAGE
            )
    if args.session_ref is None:
        return fail("export", "which session? `export weave SESSION --out DIR`", exit_codes.USAGE)
    try:
        session_id = int(args.session_ref)
    except ValueError:
        return fail(
            "export", f"SESSION is a session id, not {args.session_ref!r}", exit_codes.USAGE
        )
    store = open_store(settings, partial(fail, "export"))
    if isinstance(store, int):
        return store
    with store:
        try:
            store.get_session(session_id)
        except NotFoundError:
            return fail("export", f"no session {session_id} in {store.where}", exit_codes.USAGE)
        try:
            done = export_session(store, session_id, args.out, alternates=args.alternates)
        except ValueError as exc:
            return fail("export", str(exc), exit_codes.USAGE)
        except OSError as exc:
            return fail(
                "export", f"cannot write to {args.out}: {exc.strerror or exc}", exit_codes.USAGE
            )
    print(f"wrote {done.blocks} block(s) of session {session_id}: {done.trace} and {done.rendered}")
    return exit_codes.OK
