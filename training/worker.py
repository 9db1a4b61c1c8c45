"""`python -m training.worker JOB_ID --db URL`: run one training job to its end.

Started detached by `training.jobs.spawn_worker` (own session, stdout and stderr to the
job's worker.log). It sets the job `running`, builds the dataset once, then trains in this
process, or, with more than one GPU, under `accelerate launch` with one process per GPU
(this process waits, and rank 0 reports). Whatever happens ends in one of: `completed`
(adapter registered), `cancelled` (checkpoint saved, resumable) or `failed` (one-line error
in the job, the traceback in worker.log, resumable). Only a kill it cannot catch leaves the
job `running`; readers reap it (training.jobs.reap_dead_jobs).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import traceback
from types import FrameType

from storage import JobStatus, NotFoundError, StoreError, TraceStore
from training.jobs import DB_ENV, STOPPED_BY_SIGNAL, WORKER_MODULE, WORKER_STARTED

BASELINE_ENV = "AGENT_CONSOLE_JOB_BASELINE_EVENT"


class Stopped(Exception):
    """SIGTERM (or SIGINT) reached the worker."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {WORKER_MODULE}")
    parser.add_argument("job_id", type=int)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--db", help="the trace store's path or URL")
    where.add_argument(
        "--db-from-env", action="store_true", help=f"read the store's URL from ${DB_ENV}"
    )
    parser.add_argument("--distributed-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    db = os.environ.get(DB_ENV, "") if args.db_from_env else args.db
    try:
        store = TraceStore(db)
    except StoreError as exc:
        print(f"worker: cannot open the store: {exc}", file=sys.stderr, flush=True)
        return 5
    _stop_on_signals()
    with store:
        try:
            store.get_job(args.job_id)
        except NotFoundError:
            print(f"worker: no job {args.job_id} in {store.where}", file=sys.stderr, flush=True)
            return 2
        if args.distributed_child:
            return run_child(store, args.job_id)
        return run_worker(store, args.job_id)


def _stop_on_signals() -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise Stopped(f"{STOPPED_BY_SIGNAL} {signal.Signals(signum).name}")

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)


def run_worker(store: TraceStore, job_id: int) -> int:
    from training.trainer import Reporter, build_dataset, detect_hardware, run_training

    # This event's id is the baseline for cancel requests: any `cancel` after it is for
    # this run. One written earlier had already set `cancelling`, which is read next.
    started = store.add_job_event(job_id, "log", message=f"{WORKER_STARTED} (pid {os.getpid()})")
    job = store.get_job(job_id)
    if job.status is JobStatus.CANCELLING:
        store.add_job_event(job_id, "log", message="cancelled before training started")
        store.update_job(job_id, status=JobStatus.CANCELLED)
        return 0
    if job.status is not JobStatus.QUEUED:
        print(f"worker: job {job_id} is {job.status.value}: nothing to do", flush=True)
        return 0
    job = store.update_job(job_id, status=JobStatus.RUNNING, pid=os.getpid(), error=None)
    print(f"worker: job {job_id} ({job.kind.value}, {job.name!r}) on {job.base_model}", flush=True)
    reporter = Reporter(store, job_id)
    try:
        build_dataset(store, job, reporter.log)
        hardware = detect_hardware()
        if hardware.device == "cuda" and hardware.gpu_count > 1:
            return _launch_distributed(store, job_id, hardware.gpu_count, started.id)
        run_training(store, job, baseline_event=started.id, reporter=reporter, hardware=hardware)
    except BaseException as exc:
        _fail(store, job_id, exc)
        return 1
    return 0


def run_child(store: TraceStore, job_id: int) -> int:
    """One rank under `accelerate launch`; rank 0 reports and publishes."""
    from training.trainer import Reporter, run_training

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    reporter = Reporter(store, job_id, main=rank == 0)
    baseline = int(os.environ.get(BASELINE_ENV, "0"))
    try:
        run_training(
            store,
            store.get_job(job_id),
            baseline_event=baseline,
            reporter=reporter,
            world_size=world,
        )
    except BaseException as exc:
        if rank == 0:
            _fail(store, job_id, exc)
        else:
            traceback.print_exc()
        return 1
    return 0


def _launch_distributed(store: TraceStore, job_id: int, gpus: int, baseline: int) -> int:
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--num_processes", str(gpus),
        "--multi_gpu",
        "-m", WORKER_MODULE, str(job_id), "--db-from-env", "--distributed-child",
    ]  # fmt: skip
    store.add_job_event(job_id, "log", message=f"{gpus} GPUs: training under accelerate launch")
    env = dict(os.environ, **{BASELINE_ENV: str(baseline), DB_ENV: store.url})
    code = subprocess.call(command, env=env)
    job = store.get_job(job_id)
    if job.status in (JobStatus.RUNNING, JobStatus.CANCELLING):
        error = f"the training processes exited with code {code} without finishing the job"
        store.add_job_event(job_id, "error", message=error)
        store.update_job(job_id, status=JobStatus.FAILED, error=error)
        return 1
    return 0 if job.status is not JobStatus.FAILED else 1


def _fail(store: TraceStore, job_id: int, exc: BaseException) -> None:
    from training.trainer import TrainingError

    traceback.print_exc()
    sys.stderr.flush()
    if isinstance(exc, TrainingError | Stopped):
        message = str(exc)
    else:
        text = " ".join(str(exc).split())
        message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
        if len(message) > 400:
            message = message[:397] + "..."
        message += " (traceback in worker.log)"
    try:
        store.add_job_event(job_id, "error", message=message)
        store.update_job(job_id, status=JobStatus.FAILED, error=message)
    except Exception:
        traceback.print_exc()


if __name__ == "__main__":
    sys.exit(main())
