"""`agent-console export {sft,dpo,tokens}`: the labels' training data as JSON lines; `export
weave SESSION --out DIR`: a session in weave-agent's trace format (app/cli/weave.py)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from app import exit_codes
from app.cli.failing import command_fail

if TYPE_CHECKING:
    from agents.settings import Settings

KINDS = {
    "sft": "SFT examples: prompt/completion rows (trl's SFTTrainer loads them as they are)",
    "dpo": "DPO pairs: prompt/chosen/rejected rows (trl's DPOTrainer loads them as they are)",
    "tokens": "token-exact samples for RL trainers: prompt and completion ids, logprobs, "
    "loss mask, the session's status and the block's label",
    "weave": "one session in weave-agent's format: SESSION's event_trace_*.json and its "
    "rendering, in the --out folder",
}


def add_export_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = commands.add_parser(
        "export",
        help="write the labels' SFT examples, DPO pairs or token-exact samples as JSONL",
        description="Write training data from the trace store as JSON lines. Prompts are "
        "re-rendered exactly as the agent saw them and checked against the hash stored "
        "when each block was sampled; a block whose prompt no longer matches is reported "
        "and left out.",
    )
    export.add_argument(
        "dataset",
        choices=tuple(KINDS),
        metavar="{sft,dpo,tokens,weave}",
        help="; ".join(f"{name}: {what}" for name, what in KINDS.items()),
    )
    export.add_argument(
        "session_ref", nargs="?", metavar="SESSION", help="for `weave`: the session's id"
    )
    export.add_argument(
        "--out",
        required=True,
        metavar="FILE.jsonl|DIR",
        help="file to write (for `weave`: the folder)",
    )
    export.add_argument(
        "--alternates",
        action="store_true",
        help="for `weave`: list each block's alternates as weave-agent's `candidates`",
    )
    export.add_argument(
        "--since",
        metavar="DATE",
        help="only data whose label or verdict is from this date on (YYYY-MM-DD[THH:MM])",
    )
    export.add_argument(
        "--session",
        type=int,
        action="append",
        metavar="ID",
        help="only this session (repeatable; default: all)",
    )
    export.add_argument(
        "--chat",
        action="store_true",
        help="trl's conversational form (the prompt as a user message) instead of plain text",
    )
    export.add_argument(
        "--tokenizer",
        metavar="ID|PATH",
        help="for `tokens`: the model whose tokenizer made the ids (default: the `model` setting)",
    )


fail = command_fail("export")


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    if args.dataset == "weave":
        from app.cli.weave import run_export_weave

        return run_export_weave(args, settings)
    if args.session_ref is not None:
        return fail(
            f"a SESSION goes with `export weave`; for {args.dataset} use --session ID",
            exit_codes.USAGE,
        )
    if args.alternates:
        return fail("--alternates goes with `export weave`", exit_codes.USAGE)
    from training.datasets import parse_since

    since = None
    if args.since is not None:
        try:
            since = parse_since(args.since)
        except ValueError as exc:
            return fail(f"--since: {exc}", exit_codes.USAGE)
    if args.chat and args.dataset == "tokens":
        return fail("--chat goes with sft or dpo, not tokens", exit_codes.USAGE)
    if args.tokenizer and args.dataset != "tokens":
        return fail("--tokenizer goes with `export tokens`", exit_codes.USAGE)

    tokenize = None
    if args.dataset == "tokens":
        from agents.backends import BackendError, default_model, model_or_default
        from agents.backends.registry import MODELS
        from training.datasets import hf_tokenizer

        model = args.tokenizer or settings.model or default_model(convert=False)
        if model in MODELS:  # an offline model's name: its folder (converted when needed)
            try:
                model = model_or_default(model)
            except BackendError as exc:
                return fail(str(exc), exit_codes.MODEL)
        if model.startswith(("/", ".", "~")) and not Path(model).expanduser().is_dir():
            # a local folder that is not there: say so, before transformers' long search
            return fail(f"cannot load the tokenizer of {model!r}: no such folder", exit_codes.MODEL)
        try:
            tokenize = hf_tokenizer(model)
        except Exception as exc:  # transformers raises OSError, ValueError, ... by cause
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return fail(f"cannot load the tokenizer of {model!r}: {first}", exit_codes.MODEL)

    from storage import StoreError, TraceStore
    from training.datasets import write_jsonl

    try:
        store = TraceStore(settings.database())
    except StoreError as exc:
        return fail(str(exc), exit_codes.STORE)
    with store:
        if args.session:
            missing = sorted(set(args.session) - set(store.sessions_by_id(args.session)))
            if missing:
                return fail(
                    f"--session {missing[0]}: no such session in {store.where}", exit_codes.USAGE
                )
        try:
            report = write_jsonl(
                store,
                args.dataset,
                args.out,
                since=since,
                session_ids=args.session,
                tokenize=tokenize,
                chat=args.chat,
            )
        except OSError as exc:
            return fail(f"cannot write {args.out}: {exc.strerror or exc}", exit_codes.USAGE)
    print(report.describe())
    return exit_codes.OK
