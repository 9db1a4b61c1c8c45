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
from typing import TYPE_CHECKING

from app import __version__, exit_codes

if TYPE_CHECKING:
    from agents.settings import Settings

PROG = "agent-console"

EPILOG = """\
settings are read from config.toml in the platform config folder (or --config FILE, or
the file named by AGENT_CONSOLE_CONFIG), then from AGENT_CONSOLE_<SETTING> environment
variables (AGENT_CONSOLE_DB, AGENT_CONSOLE_THEME, AGENT_CONSOLE_BACKEND,
AGENT_CONSOLE_MODEL, AGENT_CONSOLE_BASE_URL, AGENT_CONSOLE_API_KEY,
AGENT_CONSOLE_REQUEST_TIMEOUT); flags win.

exit codes: 0 ok, 1 internal error (traceback in the log file), 2 bad usage or config,
3 no model can be loaded or served, 4 trace store cannot be opened, 130 interrupted.
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
    model = parser.add_argument_group("model")
    model.add_argument(
        "--backend",
        choices=("auto", "transformers", "openai", "vllm", "none"),
        help="where the model runs: in process (transformers, vllm), on an OpenAI-compatible "
        "server (openai), or none to browse and label only (default: auto: openai when a "
        "server is given or `agent-console serve` runs, else transformers)",
    )
    model.add_argument(
        "--model",
        dest="model_flag",
        metavar="ID|PATH",
        help="Hugging Face id, local folder, or the served model's name "
        "(default: Qwen/Qwen2.5-0.5B-Instruct in process, the server's model otherwise)",
    )
    model.add_argument(
        "--base-url",
        metavar="URL",
        help="an OpenAI-compatible server such as http://127.0.0.1:8000/v1 "
        "(the key comes from the api_key setting, AGENT_CONSOLE_API_KEY or OPENAI_API_KEY)",
    )
    model.add_argument(
        "--request-timeout",
        type=float,
        metavar="SECONDS",
        help="seconds a request to the model server may take (default: 60)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_serve_parser(commands)
    return parser


def add_serve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = commands.add_parser(
        "serve",
        help="run a vLLM server for the agent's model (LoRA, prefix caching, logprobs on)",
        description="Run a vLLM OpenAI-compatible server with the flags the agent needs, in "
        "the foreground until Ctrl-C. While it runs, a console started without --base-url "
        "uses it.",
    )
    serve.add_argument(
        "--model",
        metavar="ID|PATH",
        help="Hugging Face id or local folder (default: the `model` setting, else "
        "Qwen/Qwen2.5-0.5B-Instruct)",
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    serve.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    serve.add_argument(
        "--served-name", metavar="NAME", help="name clients ask for (default: the model)"
    )
    serve.add_argument("--max-model-len", type=int, metavar="N", help="context length to serve")
    serve.add_argument("--dtype", default="auto", help="weights dtype (default: %(default)s)")
    serve.add_argument(
        "--max-lora-rank",
        type=int,
        default=64,
        metavar="R",
        help="largest adapter rank (default: 64)",
    )
    serve.add_argument(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a LoRA adapter to serve from the start (repeatable; more can be loaded at run time)",
    )
    serve.add_argument(
        "--vllm-python",
        metavar="PATH",
        help="a Python interpreter that has vLLM (default: this one, if it has it)",
    )


def fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.db is not None and not args.db.strip():
        return fail("--db is empty: give a file path or a SQLAlchemy URL", exit_codes.USAGE)

    from agents.settings import ConfigError, load_settings

    try:
        settings = load_settings(
            args.config,
            {
                "db": args.db,
                "theme": args.theme,
                "backend": args.backend,
                "model": args.model_flag,
                "base_url": args.base_url,
                "request_timeout": args.request_timeout,
            },
        )
    except ConfigError as exc:
        return fail(str(exc), exit_codes.USAGE)

    if args.command == "serve":
        return run_serve(args, settings)

    from storage import StoreError, TraceStore

    try:
        store = TraceStore(settings.database())
    except StoreError as exc:
        return fail(str(exc), exit_codes.STORE)

    from app.console import ConsoleApp

    with store:
        ConsoleApp(store=store, settings=settings).run()
    return exit_codes.OK


def run_serve(args: argparse.Namespace, settings: Settings) -> int:
    from agents.backends import DEFAULT_MODEL, AdapterError, BackendError, ModelNotFoundError
    from agents.backends.lora import read_adapter
    from agents.serving import ServeOptions, check_model_available, find_vllm_python, serve
    from agents.settings import data_dir

    adapters = {}
    for spec in args.adapter:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            return fail(f"--adapter {spec!r}: expected NAME=PATH", exit_codes.USAGE)
        try:
            adapters[name] = str(read_adapter(name, path).path.resolve())
        except AdapterError as exc:
            return fail(str(exc), exit_codes.USAGE)
    if not 0 < args.port < 65536:
        return fail(f"--port {args.port}: not a port number", exit_codes.USAGE)
    model = args.model or settings.model.strip() or DEFAULT_MODEL
    options = ServeOptions(
        model=model,
        host=args.host,
        port=args.port,
        served_name=args.served_name,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        max_lora_rank=args.max_lora_rank,
        adapters=adapters,
    )
    try:
        check_model_available(model)
        python = find_vllm_python(args.vllm_python)
        return serve(options, python=python, data_dir=data_dir(), announce=print)
    except ModelNotFoundError as exc:
        return fail(str(exc), exit_codes.MODEL)
    except BackendError as exc:
        return fail(str(exc), exit_codes.MODEL)


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
