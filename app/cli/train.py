"""`agent-console train {sft,dpo,status,cancel,resume,logs}` and `agent-console adapters`.

A job is queued and its worker started detached (training/jobs.py); every command here
returns at once unless told to `--follow`, and Ctrl-C while following stops following,
never the job. Each command first reaps jobs whose worker died (marked failed, resumable).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from app import exit_codes
from app.cli.failing import command_fail

if TYPE_CHECKING:
    from agents.settings import Settings
    from storage import Adapter, Job, TraceStore

TRAIN_COMMANDS = ("sft", "dpo", "kto", "starter", "status", "cancel", "resume", "logs")


fail = command_fail(None)


# -- parsers ----------------------------------------------------------------------------------


def add_train_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    train = commands.add_parser(
        "train",
        help="train a LoRA adapter from the labels (SFT or DPO) in a background job; "
        "status, cancel, resume, logs",
        description="Queue a training job and return at once: a detached worker process "
        "trains a LoRA adapter on the labels' SFT examples or DPO pairs and registers it "
        "(`agent-console adapters`; use it with --adapter NAME).",
    )
    jobs = train.add_subparsers(
        dest="train_command", metavar="{sft,dpo,kto,starter,status,cancel,resume,logs}"
    )
    for kind, what in (
        ("sft", "supervised fine-tuning on good, approved and operator-edited blocks"),
        ("dpo", "preference tuning on pairs: good over bad, approved over rejected, edits "
         "over originals, picked alternates over the ones they replaced"),
        ("kto", "unpaired good and bad blocks (KTO): good, approved and edited blocks are "
         "desirable; bad, rejected and rewritten ones undesirable, sibling or not"),
    ):  # fmt: skip
        job = jobs.add_parser(
            kind,
            help=what,
            description=f"Queue {'an' if kind == 'sft' else 'a'} {kind.upper()} job: {what}.",
        )
        job.add_argument(
            "--base",
            metavar="MODEL",
            help="base model: a local folder or a Hugging Face id (default: the `model` "
            "setting, else Qwen/Qwen2.5-0.5B-Instruct)",
        )
        job.add_argument(
            "--name", help=f"the adapter's name (default: {kind}-JOBID); must be unused"
        )
        job.add_argument(
            "--epochs", type=float, default=3.0, metavar="N", help="passes over the data (3)"
        )
        job.add_argument(
            "--lr",
            type=float,
            metavar="F",
            help=f"learning rate ({'2e-4' if kind == 'sft' else '5e-5'})",
        )
        job.add_argument("--lora-r", type=int, default=16, metavar="N", help="LoRA rank (16)")
        job.add_argument(
            "--since",
            metavar="DATE",
            help="only labels and verdicts from this date on (YYYY-MM-DD[THH:MM])",
        )
        job.add_argument(
            "--qlora",
            action="store_true",
            help="4-bit base weights (QLoRA; needs a CUDA GPU and bitsandbytes)",
        )
        job.add_argument(
            "--max-length",
            type=int,
            default=2048,
            metavar="N",
            help="longest training sequence in tokens, prompt included (2048)",
        )
        job.add_argument(
            "--on",
            metavar="ADAPTER",
            help="start from a registered adapter's weights (e.g. `train dpo --on sft-3`: "
            "preference tuning on top of supervised tuning)",
        )
        job.add_argument(
            "--labels-from",
            metavar="DB",
            help="train on the labels of another trace store (a SQLite file; read from a copy)",
        )
        job.add_argument(
            "--changed-only",
            action="store_true",
            help="train on the blocks the operator wrote (edits, rewrites) only, not the "
            "model's blocks they approved: fewer rows, a faster job",
        )
        job.add_argument(
            "--follow", action="store_true", help="show a progress bar until the job ends"
        )
    starter = jobs.add_parser(
        "starter",
        help="the starter adapter for the offline model, from the teaching sessions that "
        "ship with the project",
        description="Queue an SFT job on the starter sessions (training/starter.py: a "
        "scripted operator teaching the offline model on task-family variants, none held "
        "out) and register the adapter as `starter`. The console offers to load it.",
    )
    starter.add_argument(
        "--base",
        metavar="MODEL",
        help="base model (default: the offline coder; a model with no sessions of its own "
        "trains on the coder's)",
    )
    starter.add_argument(
        "--name", default="starter", help="the adapter's name (default: %(default)s)"
    )
    starter.add_argument(
        "--follow", action="store_true", help="show a progress bar until the job ends"
    )
    status = jobs.add_parser(
        "status", help="the jobs, or one job in detail", description="List training jobs."
    )
    status.add_argument("job_id", nargs="?", metavar="ID", help="one job's details")
    cancel = jobs.add_parser(
        "cancel",
        help="stop a job gracefully (it saves a checkpoint; resumable)",
        description="Ask a job to stop: its worker saves a checkpoint and ends `cancelled`.",
    )
    cancel.add_argument("job_id", metavar="ID")
    resume = jobs.add_parser(
        "resume",
        help="continue a failed or cancelled job from its last checkpoint",
        description="Start a new worker for a failed or cancelled job.",
    )
    resume.add_argument("job_id", metavar="ID")
    resume.add_argument("--follow", action="store_true", help="show a progress bar")
    logs = jobs.add_parser(
        "logs", help="a job's worker log", description="Print a job's worker log."
    )
    logs.add_argument("job_id", metavar="ID")
    logs.add_argument("--follow", action="store_true", help="keep printing until the job ends")

    commands.add_parser(
        "adapters",
        help="list the trained adapters (use one with --adapter NAME)",
        description="List the adapters training jobs registered.",
    )


def add_adapter_argument(parser: argparse._ActionsContainer) -> None:
    parser.add_argument(
        "--adapter",
        dest="adapter_name",
        metavar="NAME",
        help="use this trained adapter (`agent-console adapters` lists them)",
    )


# -- running ----------------------------------------------------------------------------------


def run_train(args: argparse.Namespace, settings: Settings) -> int:
    from storage import StoreError, TraceStore
    from training.jobs import JobError

    command = args.train_command
    if command is None:
        return fail(
            "train needs a command: sft, dpo, kto, starter, status, cancel, resume or logs",
            exit_codes.USAGE,
        )
    try:
        store = TraceStore(settings.database())
    except StoreError as exc:
        return fail(str(exc), exit_codes.STORE)
    with store:
        try:
            if command in ("sft", "dpo", "kto", "starter"):
                return queue(store, args, settings)
            from training.jobs import reap_dead_jobs

            reap_dead_jobs(store)
            if command == "status":
                if args.job_id is None:
                    return show_jobs(store)
                return show_job(store, job_id(args.job_id))
            if command == "cancel":
                return cancel(store, job_id(args.job_id))
            if command == "resume":
                return resume(store, job_id(args.job_id), follow=args.follow)
            return show_logs(store, job_id(args.job_id), follow=args.follow)
        except JobError as exc:
            return fail(str(exc), exit_codes.USAGE)


def job_id(text: str) -> int:
    from training.jobs import JobError

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise JobError(f"{text!r} is not a job id (`agent-console train status` lists them)")
    return value


def queue(store: TraceStore, args: argparse.Namespace, settings: Settings) -> int:
    from agents.backends import BackendError, default_model, model_or_default
    from agents.settings import data_dir
    from storage import JobKind
    from training.jobs import (
        JobOptions,
        NotEnoughDataError,
        check_enough_data,
        parse_since,
        queue_job,
    )

    if args.train_command == "starter":
        return queue_starter(store, args)
    since = parse_since(args.since) if args.since is not None else None
    named = args.base or settings.model.strip()
    options = JobOptions(
        kind=JobKind(args.train_command),
        base_model=named or default_model(convert=False),
        name=args.name,
        epochs=args.epochs,
        learning_rate=args.lr,
        lora_r=args.lora_r,
        since=since,
        qlora=args.qlora,
        max_length=args.max_length,
        start_from=args.on,
        labels_from=args.labels_from,
        changed_only=args.changed_only,
    )
    if options.qlora:
        import importlib.util

        if importlib.util.find_spec("bitsandbytes") is None:
            return fail(
                "--qlora needs bitsandbytes (4-bit weights on a CUDA GPU): "
                "pip install 'agent-console[gpu]'",
                exit_codes.USAGE,
            )
    try:
        if not named:  # the default model: converted first where it is the offline one
            if options.labels_from is None:
                check_enough_data(store, options.kind, options.since, None, options.changed_only)
            options = replace(options, base_model=default_model(_stderr_line))
        else:  # an offline model's name: its folder, converted first when needed
            options = replace(options, base_model=model_or_default(named, _stderr_line))
        job = queue_job(store, options, data_dir=data_dir())
    except NotEnoughDataError as exc:
        return fail(f"too little data: {exc}", exit_codes.USAGE)
    except BackendError as exc:  # the offline model could not be prepared
        return fail(str(exc), exit_codes.MODEL)
    return queued(store, job, follow=args.follow)


def queue_starter(store: TraceStore, args: argparse.Namespace) -> int:
    from agents.backends import BackendError, model_or_default
    from agents.backends.offline import ensure_model
    from agents.settings import data_dir
    from training import starter
    from training.jobs import queue_job
    from training.teach import HeldOutError

    try:
        base = model_or_default(args.base) if args.base else ""
        base = base or str(ensure_model(_stderr_line, name=starter.MODEL))
        variants = starter.check_sessions(starter.sessions_for(base))
        job = queue_job(store, starter.job_options(base, name=args.name), data_dir=data_dir())
    except HeldOutError as exc:
        return fail(f"the starter sessions hold a held-out variant: {exc}", exit_codes.USAGE)
    except BackendError as exc:
        return fail(str(exc), exit_codes.MODEL)
    print(f"the starter sessions: {len(variants)} teaching variants, none held out")
    return queued(store, job, follow=args.follow)


def queued(store: TraceStore, job: Job, *, follow: bool) -> int:
    from storage import JobKind

    rows = job.config.get("rows_at_queue")
    noun = "pairs" if job.kind is JobKind.DPO else "examples"
    print(f"job {job.id} queued: {job.kind.value} on {rows} {noun} -> adapter {job.name!r}")
    if not follow:
        print(
            f"follow it with `agent-console train status {job.id}` or "
            f"`agent-console train logs {job.id} --follow`"
        )
        return exit_codes.OK
    return follow_job(store, job.id)


def cancel(store: TraceStore, job: int) -> int:
    from storage import JobStatus
    from training.jobs import cancel_job

    cancelled = cancel_job(store, job)
    if cancelled.status is JobStatus.CANCELLED:
        print(f"job {job} cancelled")
    else:
        print(
            f"job {job} cancelling: its worker saves a checkpoint and stops "
            f"(`agent-console train resume {job}` continues it)"
        )
    return exit_codes.OK


def resume(store: TraceStore, job: int, *, follow: bool) -> int:
    from storage import JobStatus
    from training.job_files import checkpoints_dir, last_checkpoint
    from training.jobs import resume_job

    resumed = resume_job(store, job)
    if resumed.status is JobStatus.COMPLETED:
        print(f"job {job} completed: its adapter {resumed.name!r} was already registered")
        return exit_codes.OK
    checkpoint = last_checkpoint(checkpoints_dir(resumed))
    where = f"from {checkpoint.name}" if checkpoint else "from the start (no checkpoint)"
    print(f"job {job} resumed {where}")
    return follow_job(store, job) if follow else exit_codes.OK


# -- following ---------------------------------------------------------------------------------


def follow_job(store: TraceStore, job: int, out: TextIO | None = None) -> int:
    """A progress bar (a line per update when not on a terminal) until the job ends.
    Ctrl-C stops following; the job goes on."""
    from storage import Job, JobStatus
    from training.job_lines import progress_line
    from training.jobs import follow

    out = out or sys.stdout
    live = out.isatty()
    drawn = False
    final: Job | None = None
    try:
        for item in follow(store, job):
            if isinstance(item, Job):
                final = item
                continue
            if item.kind == "progress":
                line = progress_line(item.data)
                if live:
                    out.write("\r\x1b[2K" + line)
                    drawn = True
                else:
                    out.write(line + "\n")
            elif item.kind in ("log", "checkpoint", "error", "done") and item.message:
                if drawn:
                    out.write("\n")
                    drawn = False
                out.write(f"{item.kind}: {item.message}\n")
            out.flush()
    except KeyboardInterrupt:
        if drawn:
            out.write("\n")
        print(
            f"stopped following; job {job} goes on (`agent-console train status {job}`)",
            file=out,
        )
        return exit_codes.OK
    if drawn:
        out.write("\n")
    if final is None:
        final = store.get_job(job)
    out.write(f"job {job} {final.status.value}\n")
    out.flush()
    if final.status is JobStatus.FAILED:
        return fail(f"job {job} failed: {final.error}", exit_codes.FAILED)
    return exit_codes.OK


# -- showing -----------------------------------------------------------------------------------


def _age(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


def _loss(metrics: dict[str, Any]) -> str:
    value = metrics.get("loss", metrics.get("train_loss"))
    return f"{value:.4f}" if isinstance(value, int | float) else "-"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def show_jobs(store: TraceStore) -> int:
    jobs = store.list_jobs()
    if not jobs:
        print("no training jobs yet: `agent-console train sft` or `train dpo` queues one")
        return exit_codes.OK
    rows = [
        [
            str(j.id),
            j.kind.value,
            j.name,
            j.status.value,
            f"{j.progress * 100:.0f}%",
            _loss(j.metrics),
            _short(j.base_model or "-"),
            _age(j.created_at),
        ]
        for j in jobs
    ]
    print(table(["ID", "KIND", "NAME", "STATUS", "DONE", "LOSS", "BASE", "CREATED"], rows))
    return exit_codes.OK


def _short(text: str, width: int = 40) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3) :]


def show_job(store: TraceStore, job_number: int) -> int:
    from training.job_files import checkpoints_dir, last_checkpoint, log_path
    from training.job_lines import format_duration, progress_line
    from training.jobs import get_job

    job = get_job(store, job_number)
    config = job.config
    lines = [
        f"job {job.id}: {job.kind.value} -> adapter {job.name!r}, {job.status.value}",
        f"  base model   {job.base_model}",
        f"  created      {_age(job.created_at)}"
        + (f", started {_age(job.started_at)}" if job.started_at else "")
        + (f", finished {_age(job.finished_at)}" if job.finished_at else ""),
        f"  options      epochs {config.get('epochs')}, lr {config.get('learning_rate')}, "
        f"lora r {config.get('lora_r')}, max length {config.get('max_length')}"
        + (", qlora" if config.get("qlora") else "")
        + (f", since {_age(config['since'])}" if config.get("since") else ""),
    ]
    if job.pid is not None:
        lines.append(f"  worker       pid {job.pid} on {config.get('host', '?')}")
    if job.metrics:
        lines.append(f"  progress     {progress_line(job.metrics)}")
        if job.started_at and job.finished_at:
            lines.append(f"  took         {format_duration(job.finished_at - job.started_at)}")
    checkpoint = last_checkpoint(checkpoints_dir(job)) if "data_dir" in config else None
    if checkpoint is not None:
        lines.append(f"  checkpoint   {checkpoint}")
    if "data_dir" in config:
        lines.append(f"  log          {log_path(job)}")
    if job.error:
        lines.append(f"  error        {job.error}")
    from storage import NotFoundError

    try:
        adapter = store.get_adapter(job.name)
    except NotFoundError:
        pass
    else:
        if adapter.job_id == job.id:
            lines.append(f"  adapter      {adapter.path}")
    print("\n".join(lines))
    return exit_codes.OK


def show_logs(store: TraceStore, job_number: int, *, follow: bool) -> int:
    from training.job_files import log_path
    from training.job_lines import event_line
    from training.jobs import FINISHED, get_job, reap_dead_jobs

    job = get_job(store, job_number)
    path = log_path(job) if "data_dir" in job.config else None
    if path is None or not path.is_file():
        # Another host's job (a shared store), or a worker that never started: the events.
        for event in store.job_events(job.id):
            print(event_line(event))
        return exit_codes.OK
    offset = _print_from(path, 0)
    if not follow:
        return exit_codes.OK
    try:
        while True:
            finished = store.get_job(job.id).status in FINISHED
            offset = _print_from(path, offset)
            if finished:
                return exit_codes.OK
            reap_dead_jobs(store, [store.get_job(job.id)])
            time.sleep(0.5)
    except KeyboardInterrupt:
        return exit_codes.OK


def _print_from(path: Path, offset: int) -> int:
    with path.open("rb") as log:
        log.seek(offset)
        chunk = log.read()
    if chunk:
        sys.stdout.write(chunk.decode("utf-8", errors="replace"))
        sys.stdout.flush()
    return offset + len(chunk)


# -- adapters ----------------------------------------------------------------------------------


def run_adapters(settings: Settings) -> int:
    from storage import StoreError, TraceStore

    try:
        store = TraceStore(settings.database())
    except StoreError as exc:
        return fail(str(exc), exit_codes.STORE)
    with store:
        adapters = store.list_adapters()
    if not adapters:
        print("no adapters yet: `agent-console train sft` (or dpo) trains one from the labels")
        return exit_codes.OK
    from agents.adapters import adapter_problem

    problems = {a.name: adapter_problem(a) for a in adapters}
    rows = [
        [
            a.name,
            _short(a.base_model, 32),
            str(a.job_id) if a.job_id is not None else "-",
            _age(a.created_at),
            _loss(a.metrics),
            str(a.metrics.get("dataset", {}).get("rows", "-")),
            _files(a, problems[a.name]),
            a.path,
        ]
        for a in adapters
    ]
    print(table(["NAME", "BASE", "JOB", "CREATED", "LOSS", "ROWS", "FILES", "PATH"], rows))
    for problem in problems.values():
        if problem is not None:
            print(f"unusable: {problem}")
    return exit_codes.OK


def _files(adapter: Adapter, problem: str | None) -> str:
    if problem is None:
        return "yes"
    return "BAD" if Path(adapter.path).is_dir() else "MISSING"


def _stderr_line(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
