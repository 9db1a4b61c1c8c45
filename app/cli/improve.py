"""`agent-console improve`: rounds of rollouts on a task family, labelled by the tasks' own
checks, trained, and kept only when held-out variants get better (`training.improve`).
One line per round on stdout; `--resume ID` continues a run from its last complete step."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from app import exit_codes
from app.cli.common import open_model, open_store, refuse_without_sandbox
from app.cli.failing import command_fail
from app.signals import ending_on_signals

if TYPE_CHECKING:
    from agents.settings import Settings
    from storage import BatchStatus, TraceStore


def add_improve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    improve = commands.add_parser(
        "improve",
        help="improve the agent between sessions: rollouts rewarded by the tasks' checks, "
        "trained, kept only when held-out variants get better",
        description="Each round runs --per-round teaching variants of the family, labels "
        "them from their checks (a solved session's path good, a failed one's actions bad; "
        "never over an operator's label), trains an SFT adapter on the solved paths so far "
        "and then (--then) a KTO or DPO adapter on top of it from the same labels, "
        "and measures it against the adapter in use on --held-out held-out variants. It is "
        "promoted only when its pass rate's 95%% interval lies above the current one's rate. "
        "Killed at any point, `--resume ID` continues from the last complete step.",
    )
    improve.add_argument(
        "--family",
        metavar="NAME",
        help="the task family to improve on, or a benchmark suite (humaneval, jsonl:PATH: "
        "rollouts on its teaching problems, measured on its held-out ones, every 4th)",
    )
    improve.add_argument("--rounds", type=int, default=3, metavar="R", help="default: 3")
    improve.add_argument(
        "--per-round", type=int, default=8, metavar="N", help="rollouts per round (default: 8)"
    )
    improve.add_argument(
        "--held-out", type=int, default=10, metavar="K",
        help="held-out variants each adapter is measured on (default: 10)",
    )  # fmt: skip
    improve.add_argument(
        "--held-out-from", type=int, default=0, metavar="I",
        help="the first held-out variant measured (default: 0)",
    )  # fmt: skip
    improve.add_argument(
        "--workers", dest="improve_workers", type=int, default=1, metavar="W",
        help="sessions at a time (default: 1)",
    )  # fmt: skip
    improve.add_argument(
        "--ray", dest="improve_ray", metavar="ADDRESS",
        help="run the rollouts as Ray tasks on the cluster at ADDRESS (a PostgreSQL store)",
    )  # fmt: skip
    improve.add_argument("--epochs", type=float, default=2.0, help="per round (default: 2)")
    improve.add_argument(
        "--then", dest="improve_then", choices=("kto", "dpo", "none"), default="kto",
        help="the preference stage after each round's SFT job (default: kto)",
    )  # fmt: skip
    improve.add_argument(
        "--choose-by-checks", action="store_true",
        help="the rollouts try each action's candidates against the task's checks on a copy "
        "of the work dir and run one that passes: more solved paths to train on, and pairs "
        "of a candidate that passed over one that failed (held-out sessions never do)",
    )  # fmt: skip
    improve.add_argument(
        "--resume", dest="improve_resume", type=int, metavar="ID", help="continue run ID"
    )
    improve.add_argument(
        "--list", dest="improve_list", action="store_true", help="list the runs and their rounds"
    )


fail = command_fail("improve")


def run_improve(args: argparse.Namespace, settings: Settings) -> int:
    from agents.backends import BackendError
    from training.improve import ImproveConfig, ImproveError

    if sum((args.family is not None, args.improve_resume is not None, args.improve_list)) != 1:
        return fail("give one of --family NAME, --resume ID or --list", exit_codes.USAGE)
    config = None
    if args.family is not None:
        try:
            config = ImproveConfig(
                family=args.family,
                rounds=args.rounds,
                per_round=args.per_round,
                held_out=args.held_out,
                held_out_from=args.held_out_from,
                workers=args.improve_workers,
                ray=args.improve_ray,
                epochs=args.epochs,
                then=args.improve_then,
                choose_by_checks=args.choose_by_checks,
                base_model=_base_model(settings.model),
            )
        except ImproveError as exc:
            return fail(str(exc), exit_codes.USAGE)
        except BackendError as exc:  # an offline model that is not installed
            return fail(str(exc), exit_codes.MODEL)
    store = open_store(settings, fail)
    if isinstance(store, int):
        return store
    with store:
        if args.improve_list:
            return _list(store)
        if config is not None:
            run = store.create_improvement(config.family, config=config.to_config())
        else:
            from storage import NotFoundError

            try:
                run = store.get_improvement(args.improve_resume)
            except NotFoundError:
                return fail(f"--resume {args.improve_resume}: no such run", exit_codes.USAGE)
            if run.status == "completed":
                return fail(f"run {run.id} is completed: nothing to resume", exit_codes.USAGE)
        return _go(store, settings, run.id)


def _go(store: TraceStore, settings: Settings, run_id: int) -> int:
    from agents import batch as b
    from agents.adapters import use_registered_adapter
    from agents.backends import BackendError
    from agents.runtime import UNATTENDED, session_options
    from agents.settings import data_dir
    from training.improve import Improver, Stopped

    run = store.get_improvement(run_id)
    refused = refuse_without_sandbox(False, fail)
    if refused is not None:
        return refused
    ray = run.config.get("ray")
    if ray is not None:
        try:
            b.connect_ray(ray)
        except b.BatchStopped as exc:
            return fail(str(exc), exit_codes.USAGE)
    opened = open_model(settings, store, run.state.get("adapter"), fail)
    if isinstance(opened, int):
        return opened
    backend = opened
    try:
        options = session_options(settings, backend, **UNATTENDED)

        def run_batch(batch_id: int, adapter: str | None) -> BatchStatus:
            use_registered_adapter(store, backend, adapter)
            workers = int(run.config.get("workers", 1))
            if ray is not None:
                done = b.run_ray(
                    store, settings, options, batch_id, workers, address=ray, adapter=adapter
                )
            else:
                context = b.WorkerContext(store, backend, options, settings.sessions_dir())
                done = b.run_local(context, batch_id, workers)
            return done.status

        improver = Improver(
            store,
            run,
            backend,
            run_batch,
            data_dir=data_dir(),
            say=lambda line: print(line, flush=True),
        )
        print(
            f"improvement run {run.id}: family {run.family}, "
            f"{run.config['rounds']} rounds of {run.config['per_round']}",
            file=sys.stderr,
            flush=True,
        )
        with ending_on_signals():
            try:
                done = improver.go()
            except (Stopped, b.BatchStopped, KeyboardInterrupt) as exc:
                reason = str(exc) or "interrupted"
                return fail(
                    f"{reason}; resume with `agent-console improve --resume {run.id}`",
                    exit_codes.INTERRUPTED,
                )
            except BackendError as exc:  # the server went away, or refused an adapter
                return fail(
                    f"{exc}; resume with `agent-console improve --resume {run.id}`",
                    exit_codes.MODEL,
                )
    finally:
        backend.close()
    adapter = done.state.get("adapter") or "the base model"
    print(f"run {done.id} completed: {adapter} in use", file=sys.stderr)
    return exit_codes.OK


def _list(store: TraceStore) -> int:
    from training.improve import round_line

    runs = store.list_improvements()
    if not runs:
        print("no improvement runs yet: agent-console improve --family NAME")
        return exit_codes.OK
    for run in runs:
        adapter = run.state.get("adapter") or "base"
        print(f"run {run.id}  {run.family}  {run.status}  in use: {adapter}")
        for this in run.state.get("rounds", []):
            print(f"  {round_line(this)}")
    return exit_codes.OK


def _base_model(named: str) -> str:
    """The model an improvement run trains: an offline model's name becomes its folder
    (converted when needed); anything else as given ("": the default, resolved later)."""
    from agents.backends import model_or_default
    from agents.backends.registry import MODELS

    return model_or_default(named) if named in MODELS else named
