"""The `agent-console` command.

Only the standard library is imported at module level: `--version` and `--help` answer
before anything heavy loads, and the console's first frame is not held up by the store.
Errors a user can cause end in one line on stderr and a documented exit code; anything
else is a bug, logged with its traceback to a file, reported in one line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from app import __version__, exit_codes

PROG = "agent-console"

EPILOG = """\
settings are read from config.toml in the platform config folder (or --config FILE, or
the file named by AGENT_CONSOLE_CONFIG), then from AGENT_CONSOLE_<SETTING> environment
variables (AGENT_CONSOLE_DB, AGENT_CONSOLE_THEME); flags win.

exit codes: 0 ok, 1 internal error (traceback in the log file), 2 bad usage or config,
4 trace store cannot be opened, 130 interrupted.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Run an LLM agent in the terminal, approve or edit its actions, label its trace\n"
            "tree, and train it from the labels. Opens the console on the trace store."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"{PROG} {__version__}",
        help="print the version and exit",
    )
    parser.add_argument(
        "--db",
        metavar="PATH|URL",
        help="trace store: a SQLite file path or a SQLAlchemy URL such as "
        "postgresql+psycopg://user@host/db (default: traces.db in the platform data folder)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="read settings from this TOML file instead of the platform config folder's config.toml",
    )
    parser.add_argument(
        "--theme",
        metavar="NAME",
        help="colour theme: a Textual theme name or a theme file's name (default: agent-console)",
    )
    return parser


def fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.db is not None and not args.db.strip():
        return fail("--db is empty: give a file path or a SQLAlchemy URL", exit_codes.USAGE)

    from agents.settings import ConfigError, load_settings

    try:
        settings = load_settings(args.config, {"db": args.db, "theme": args.theme})
    except ConfigError as exc:
        return fail(str(exc), exit_codes.USAGE)

    from storage import StoreError, TraceStore

    try:
        store = TraceStore(settings.database())
    except StoreError as exc:
        return fail(str(exc), exit_codes.STORE)

    from app.console import ConsoleApp

    with store:
        ConsoleApp(store=store, settings=settings).run()
    return exit_codes.OK


def log_crash() -> str:
    """Write the current exception's traceback to the log file; return its path."""
    import traceback

    from agents.settings import data_dir

    try:
        folder = data_dir() / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "crash.log"
        with path.open("a", encoding="utf-8") as log:
            log.write(traceback.format_exc() + "\n")
        return str(path)
    except OSError:
        return "(the log file could not be written)"


def main(argv: Sequence[str] | None = None) -> None:
    try:
        code = run(argv)
    except KeyboardInterrupt:
        code = exit_codes.INTERRUPTED
    except Exception as exc:
        where = log_crash()
        code = fail(
            f"internal error: {type(exc).__name__}: {exc} (traceback in {where})",
            exit_codes.INTERNAL,
        )
    sys.exit(code)


if __name__ == "__main__":
    main()
