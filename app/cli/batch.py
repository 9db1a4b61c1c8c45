"""`agent-console batch TASKS.jsonl`: many headless sessions, N at a time, on this machine
or a Ray cluster (see agents/batch.py); `--resume ID` takes up a stopped batch, `--list`
and `--show ID` report."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from app import exit_codes
from app.cli.common import open_model, open_store, refuse_without_sandbox
from app.cli.failing import command_fail
from app.signals import ending_on_signals

if TYPE_CHECKING:
    from agents.batch import BatchProgress, Summary
    from agents.settings import Settings
    from storage import Batch, BatchTask, TraceStore

APPROVALS = ("auto", "evaluated", "deny")
BAR_WIDTH = 20


def add_batch_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    batch = commands.add_parser(
        "batch",
        help="run one headless session per task of a JSON-lines file, N at a time, "
        "locally or on a Ray cluster",
        description="Run one headless session per line of TASKS.jsonl (each line "
        '{"task": "vigenere"} or {"prompt": "..."}, optionally with "id", "message", '
        '"max_ticks"), N at a time against one model backend (a vLLM server batches their '
        "requests), every session written to the store. Ctrl-C stops cleanly; "
        "`--resume ID` runs what is left. The results: each task's checks, the mean "
        "reward and the tokens, per adapter across the batches of the same file.",
    )
    batch.add_argument("tasks", nargs="?", metavar="TASKS.jsonl", help="the tasks to run")
    batch.add_argument(
        "--suite",
        metavar="SUITE",
        help="run a benchmark's problems instead of a tasks file: humaneval, "
        "humaneval:START-END, humaneval:every=4, humaneval:held-out, or jsonl:PATH[:...] "
        "(a JSON-lines file of problems in HumanEval's format)",
    )
    batch.add_argument(
        "--workers", type=int, default=4, metavar="N", help="sessions at a time (default: 4)"
    )
    batch.add_argument(
        "--approval",
        dest="batch_approval",
        choices=APPROVALS,
        default="auto",
        help="who approves actions: every one (auto), those scoring over the threshold "
        "(evaluated), none (deny); default: auto",
    )
    batch.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the sessions as Ray tasks on the cluster at ADDRESS (`auto`: the one this "
        "machine is part of); needs a PostgreSQL store and a model server",
    )
    batch.add_argument(
        "--adapter",
        dest="batch_adapter",
        metavar="NAME",
        help="sample with this registered adapter (the batch compares it with the base)",
    )
    batch.add_argument(
        "--resume", dest="batch_resume", type=int, metavar="ID", help="run what batch ID left"
    )
    batch.add_argument("--list", dest="batch_list", action="store_true", help="list the batches")
    batch.add_argument(
        "--show", dest="batch_show", type=int, metavar="ID", help="a batch's tasks and results"
    )


fail = command_fail("batch")


def run_batch(args: argparse.Namespace, settings: Settings) -> int:
    chosen = [
        name
        for name, given in (
            ("TASKS.jsonl", args.tasks is not None),
            ("--suite", args.suite is not None),
            ("--resume", args.batch_resume is not None),
            ("--list", args.batch_list),
            ("--show", args.batch_show is not None),
        )
        if given
    ]
    if len(chosen) != 1:
        what = " and ".join(chosen) if chosen else "nothing"
        return fail(
            f"give one of TASKS.jsonl, --suite SUITE, --resume ID, --list or --show ID "
            f"(got {what})",
            exit_codes.USAGE,
        )
    if args.workers < 1:
        return fail("--workers must be at least 1", exit_codes.USAGE)
    log_path = _log_to_file()

    specs: Any = None
    if args.tasks is not None or args.suite is not None:
        from agents.batch import TasksFileError, read_tasks, suite_tasks

        try:
            specs = read_tasks(args.tasks) if args.suite is None else suite_tasks(args.suite)
        except TasksFileError as exc:
            return fail(str(exc), exit_codes.USAGE)
    store = open_store(settings, fail)
    if isinstance(store, int):
        return store
    with store:
        if args.batch_list:
            return _list(store)
        if args.batch_show is not None:
            return _show(store, args.batch_show)
        return _run(args, settings, store, specs, log_path)


def _log_to_file() -> str:
    """Warnings and a failed task's traceback go to logs/batch.log in the data folder, not
    over the progress line."""
    import logging

    from agents.safe_text import EscapingFormatter
    from agents.settings import data_dir

    folder = data_dir() / "logs"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = logging.FileHandler(folder / "batch.log", encoding="utf-8")
    except OSError:
        handler = logging.NullHandler()
    handler.setFormatter(EscapingFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    return str(folder / "batch.log")


def _run(
    args: argparse.Namespace, settings: Settings, store: TraceStore, specs: Any, log_path: str
) -> int:

    from agents import batch as b
    from agents.runtime import UNATTENDED, session_options
    from storage import BatchStatus, NotFoundError

    if args.ray is not None:
        problem = _ray_problem(store, settings)
        if problem:
            return fail(problem, exit_codes.USAGE)
    if args.batch_resume is not None:
        try:
            batch = store.get_batch(args.batch_resume)
        except NotFoundError:
            return fail(f"--resume {args.batch_resume}: no such batch", exit_codes.USAGE)
        if batch.status is BatchStatus.COMPLETED:
            return fail(f"batch {batch.id} is completed: nothing to resume", exit_codes.USAGE)
        adapter_name = batch.config.get("adapter")
    else:
        adapter_name = args.batch_adapter
    workers = args.workers

    refused = refuse_without_sandbox(args.unsafe_no_sandbox, fail)
    if refused is not None:
        return refused

    if args.ray is not None:
        try:
            b.connect_ray(args.ray)
        except b.BatchStopped as exc:
            return fail(str(exc), exit_codes.USAGE)

    opened = open_model(settings, store, adapter_name, fail)
    if isinstance(opened, int):
        return opened
    backend = opened
    adapter = backend.active_adapter
    try:
        options = session_options(
            settings,
            backend,
            # every session of a batch sees the same context: comparable
            **{**UNATTENDED, "approval": args.batch_approval},
            unsafe_no_sandbox=args.unsafe_no_sandbox,
        )
        if args.batch_resume is None:
            config = {
                "workers": workers,
                "approval": args.batch_approval,
                "backend": backend.name,
                "model": backend.model,
                "adapter": adapter,
                "ray": args.ray,
            }
            batch = b.start_batch(store, args.tasks or args.suite, config, read=specs)
        print(
            f"batch {batch.id}: {len(store.batch_tasks(batch.id))} tasks, {workers} at a time"
            + (f" on Ray ({args.ray})" if args.ray else ""),
            file=sys.stderr,
            flush=True,
        )
        bar = _Bar(sys.stderr, lambda: store.batch_tasks(batch.id))
        # SIGTERM and SIGHUP stop the batch as Ctrl-C does: sessions aborted, resumable
        with ending_on_signals():
            try:
                if args.ray is not None:
                    done = b.run_ray(
                        store,
                        settings,
                        options,
                        batch.id,
                        workers,
                        address=args.ray,
                        adapter=adapter,
                        on_progress=bar,
                    )
                else:
                    context = b.WorkerContext(store, backend, options, settings.sessions_dir())
                    done = b.run_local(context, batch.id, workers, on_progress=bar)
            except b.BatchStopped as exc:
                bar.close()
                print(f"resume with `agent-console batch --resume {batch.id}`", file=sys.stderr)
                code = exit_codes.MODEL if "model backend" in str(exc) else exit_codes.FAILED
                return fail(str(exc), code)
            finally:
                bar.close()
    finally:
        backend.close()
    _report(store, done, sys.stdout)
    broken = [t for t in store.batch_tasks(done.id) if (t.error or "").startswith("internal error")]
    if broken:
        print(
            f"{len(broken)} task(s) hit an internal error: tracebacks in {log_path}",
            file=sys.stderr,
        )
    if done.status is BatchStatus.ABORTED:
        print(
            f"stopped: resume with `agent-console batch --resume {done.id}`",
            file=sys.stderr,
        )
        return exit_codes.INTERRUPTED
    return exit_codes.OK


def _ray_problem(store: TraceStore, settings: Settings) -> str | None:
    from agents.backends import resolve

    if not store.url.startswith("postgresql"):
        return (
            "--ray needs a store every machine can write to: a PostgreSQL URL "
            "(--db postgresql+psycopg://USER:PASSWORD@HOST/DB)"
        )
    kind, url, _ = resolve(settings)
    if kind != "openai" or not url:
        return (
            "--ray needs a model server the workers share: start one with `agent-console "
            "serve` and pass --base-url"
        )
    try:
        import ray  # noqa: F401
    except ImportError:
        return "--ray needs Ray: pip install 'agent-console[ray]'"
    return None


class _Bar:
    """Progress: one line redrawn on a terminal; elsewhere (a log file, CI) a line per
    finished task and the counts at most every `SUMMARY_SECONDS`."""

    def __init__(
        self,
        out: TextIO,
        tasks: Callable[[], list[BatchTask]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.out = out
        self.live = out.isatty()
        self.tasks = tasks
        self.clock = clock
        self.last = ""
        self.drawn = False
        self.told: set[int] = set()
        self.summed = clock()

    def __call__(self, progress: BatchProgress) -> None:
        from agents.batch import describe_counts

        filled = round(BAR_WIDTH * progress.finished / progress.total) if progress.total else 0
        bar = "█" * filled + "░" * (BAR_WIDTH - filled)
        counts = (
            f"{progress.finished}/{progress.total} tasks: "
            f"{describe_counts(progress.counts)} · {progress.tokens_per_second:.0f} tokens/s"
        )
        if self.live:
            line = f"{bar} {counts}"
            if line != self.last:
                self.last = line
                self.out.write("\r\x1b[2K" + line)
                self.drawn = True
                self.out.flush()
            return
        for task in self._newly_finished():
            self.out.write(_finished_line(task) + "\n")
        now = self.clock()
        if counts != self.last and now - self.summed >= SUMMARY_SECONDS:
            self.last, self.summed = counts, now
            self.out.write(counts + "\n")
        self.out.flush()

    def _newly_finished(self) -> list[BatchTask]:
        if self.tasks is None:
            return []
        done = [t for t in self.tasks() if t.status.value in _FINISHED and t.id not in self.told]
        self.told.update(t.id for t in done)
        return done

    def close(self) -> None:
        if self.drawn:
            self.out.write("\n")
            self.out.flush()
            self.drawn = False
        elif not self.live:
            for task in self._newly_finished():
                self.out.write(_finished_line(task) + "\n")
            self.out.flush()


#: A non-terminal's progress says the counts at most this often.
SUMMARY_SECONDS = 30.0
_FINISHED = ("completed", "failed", "truncated")


def _finished_line(task: BatchTask) -> str:
    """`task 3 (vigenere) truncated in 41 s: the context is full: ...`"""
    from agents.backends.base import one_line
    from agents.safe_text import escape_controls

    name = task.spec.get("id") or task.spec.get("task") or task.spec.get("family") or "prompt"
    seconds = task.result.get("seconds")
    took = f" in {seconds:.0f} s" if isinstance(seconds, (int, float)) else ""
    why = f": {one_line(task.error, 200)}" if task.error else ""
    return escape_controls(f"task {task.line} ({name}) {task.status.value}{took}{why}")


def _summary_line(summary: Summary) -> str:
    from agents.batch import describe_counts

    checks = (
        f"{summary.pass_rate * 100:.0f}% of checks passed, {summary.solved_text()}"
        if summary.pass_rate is not None
        else "no checks"
    )
    reward = f"{summary.mean_reward:.3f}" if summary.mean_reward is not None else "-"
    return (
        f"{describe_counts(summary.counts)}; {checks}; mean reward {reward}; "
        f"{summary.tokens} tokens"
    )


def _report(store: TraceStore, batch: Batch, out: TextIO) -> None:
    from agents.batch import by_adapter, summarize

    print(
        f"batch {batch.id} {batch.status.value}: {_summary_line(summarize(store, batch))}", file=out
    )
    rows = by_adapter(store, batch)
    if len(rows) > 1:
        print("by adapter, latest batch of the same tasks:", file=out)
        for row in rows:
            name = row.adapter or "base"
            print(f"  {name:<20} batch {row.batch.id:<5} {_summary_line(row)}", file=out)


def _list(store: TraceStore) -> int:
    from agents.batch import summarize

    batches = store.list_batches()
    if not batches:
        print("no batches yet: `agent-console batch TASKS.jsonl`")
        return exit_codes.OK
    for batch in batches:
        adapter = batch.config.get("adapter") or "base"
        print(
            f"{batch.id:>4}  {batch.status.value:<9} {batch.name:<24} {adapter:<16} "
            f"{_summary_line(summarize(store, batch))}"
        )
    return exit_codes.OK


def _show(store: TraceStore, batch_id: int) -> int:
    from agents.batch import spec_name
    from storage import NotFoundError

    try:
        batch = store.get_batch(batch_id)
    except NotFoundError:
        return fail(f"--show {batch_id}: no such batch", exit_codes.USAGE)
    for task in store.batch_tasks(batch.id):
        r = task.result
        checks = f"{r['checks_passed']}/{r['checks_total']}" if r.get("checks_total") else "-"
        session = task.session_id if task.session_id is not None else "-"
        print(
            f"{task.line:>4}  {spec_name(task.spec):<28} {task.status.value:<9} "
            f"session {session!s:<6} checks {checks:<5} reward {r.get('reward', '-')!s:<6} "
            f"tokens {r.get('tokens', 0)}" + (f"  ({task.error})" if task.error else "")
        )
    _report(store, batch, sys.stdout)
    return exit_codes.OK
